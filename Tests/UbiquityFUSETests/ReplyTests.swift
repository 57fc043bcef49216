// The rules of a request's one answer (Reply.swift's AnswerState): one answer, deregistering the interrupt
// callback first while waiting, an interrupt answering only while the request waits.
import Testing
@testable import UbiquityFUSE

@Suite struct AnswerStateTests {
    @Test func anOpenRequestIsAnsweredOnceOnly() {
        var s = AnswerState()
        #expect(s.answer() == .send)
        #expect(s.answer() == .refuse)
        #expect(s.phase == .answered)
    }

    @Test func anAnswerWhileWaitingDeregistersTheInterruptFirst() {
        var s = AnswerState()
        s.beginWaiting()
        #expect(s.answer() == .deregisterAndSend)
        #expect(s.interrupt() == false) // a late interrupt callback finds the request answered
        #expect(s.answer() == .refuse)
    }

    @Test func anInterruptTakesAWaitingRequestAndNothingElseAnswers() {
        var s = AnswerState()
        s.beginWaiting()
        #expect(s.interrupt() == true)
        #expect(s.interrupt() == false)
        #expect(s.endWaiting() == false) // the transfer's completion: nobody waits any more
        #expect(s.answer() == .refuse)
    }

    @Test func theCompletionEndsTheWaitThenAnswersPlainly() {
        var s = AnswerState()
        s.beginWaiting()
        #expect(s.endWaiting() == true)
        #expect(s.interrupt() == false)
        #expect(s.answer() == .send)
    }

    @Test func aRequestMayWaitAgainAfterAWait() {
        var s = AnswerState()
        s.beginWaiting()
        #expect(s.endWaiting() == true)
        s.beginWaiting()
        #expect(s.phase == .waiting)
        #expect(s.interrupt() == true)
    }

    @Test func aRequestDroppedUnansweredIsAnsweredThenAndOnlyThen() {
        var s = AnswerState()
        #expect(s.drop() == true) // nothing answered it: the Reply's deinit answers EIO
        #expect(s.answer() == .refuse)
        var answered = AnswerState()
        #expect(answered.answer() == .send)
        #expect(answered.drop() == false)
        var interrupted = AnswerState()
        interrupted.beginWaiting()
        #expect(interrupted.interrupt() == true)
        #expect(interrupted.drop() == false) // its EINTR is the answer
    }

    @Test func anInterruptOfARequestThatIsNotWaitingDoesNothing() {
        var s = AnswerState()
        #expect(s.interrupt() == false)
        #expect(s.answer() == .send)
    }
}

@Suite struct AdapterErrnoTests {
    @Test func theAdaptersOwnRefusalsHaveTheirErrno() {
        #expect(AdapterError.badHandle.errno == 9)        // EBADF
        #expect(AdapterError.bufferTooSmall.errno == 34)  // ERANGE
        #expect(AdapterError.unknownAttribute.errno == 95) // ENOTSUP
        #expect(AdapterError.system(.noSpace).errno == 28) // passed on as it is
        #expect(AdapterError.unanswered.errno == 5)        // EIO
    }
}
