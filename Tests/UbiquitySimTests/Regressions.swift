// The shrunk traces that found bugs in the core, each an explicit list of steps (printed by `ubiquity-simulate
// --seed N --only I,J,... --literal`, or for a new failure by `--literal` alone, which prints the shrunk plan):
// they run the same whatever the plan generator becomes. Each must pass from now on.
import Testing
import UbiquitySim

/// A run that once found a bug, as an explicit plan.
struct Regression: Sendable, CustomTestStringConvertible {
    let name: String
    let plan: Plan
    init(_ name: String, _ plan: Plan) { self.name = name; self.plan = plan }
    var testDescription: String { name }
}

extension Regression {
    /// c's write lands but its answer is lost; a sees it and deletes the file; c's retry met the tombstone and
    /// revived the file as if its write were a concurrent edit.
    /// (Steps 3, 4, 8, 10, 148, 153, 160 of seed 5's generated plan.)
    static let deleteAfterLostAnswer = Regression(
        "deleteAfterLostAnswer",
        Plan(seed: 5, devices: 3, feedPage: 4,
             rates: FaultRates(dropRequest: 0.04, dropResponse: 0.11, duplicate: 0.09, staleFeed: 0.05,
                               slowTransfer: 0.16, corrupt: 0.03),
             steps: [
                Step(.pull, on: 2, seed: 0x75646c12c55ba4df, after: 503000000),
                Step(.create, on: 2, seed: 0x6422556f25ce1ace, after: 4318000000),
                Step(.push, on: 2, seed: 0xc4ff2899c8ba1df9, after: 1401000000),
                Step(.truncate, on: 2, seed: 0x272352ef1e581b, after: 4004000000),
                Step(.push, on: 2, seed: 0x3ca64e8753289085, after: 0),
                Step(.pull, on: 0, seed: 0x10db6698f9962940, after: 3459000000),
                Step(.delete, on: 0, seed: 0xb6a4534bf1daa0ac, after: 2929000000),
             ]))

    /// c's write lands but its answer is lost; a sees it, changes the file further (pushed) and deletes it;
    /// c's retry met the tombstone of a content it never saw and revived the file as a concurrent edit. With
    /// change ids the retry is answered as applied and the delete stands. (deleteAfterLostAnswer with a's
    /// append and push, steps 149 and 151 of seed 5's generated plan, before its delete.)
    static let deleteAfterLostAnswerAndAFurtherChange = Regression(
        "deleteAfterLostAnswerAndAFurtherChange",
        Plan(seed: 5, devices: 3, feedPage: 4,
             rates: FaultRates(dropRequest: 0.04, dropResponse: 0.11, duplicate: 0.09, staleFeed: 0.05,
                               slowTransfer: 0.16, corrupt: 0.03),
             steps: [
                Step(.pull, on: 2, seed: 0x75646c12c55ba4df, after: 503000000),
                Step(.create, on: 2, seed: 0x6422556f25ce1ace, after: 4318000000),
                Step(.push, on: 2, seed: 0xc4ff2899c8ba1df9, after: 1401000000),
                Step(.truncate, on: 2, seed: 0x272352ef1e581b, after: 4004000000),
                Step(.push, on: 2, seed: 0x3ca64e8753289085, after: 0),
                Step(.pull, on: 0, seed: 0x10db6698f9962940, after: 3459000000),
                Step(.append, on: 0, seed: 0xf622d09787f9829a, after: 3196000000),
                Step(.push, on: 0, seed: 0x73ad9dfedb4932a, after: 1046000000),
                Step(.delete, on: 0, seed: 0xb6a4534bf1daa0ac, after: 2929000000),
             ]))

    /// A deleted folder was pushed before the delete of the file in it (parent first): the remote refused (not
    /// empty) and the folder came back.
    /// (Steps 143, 152, 155, 159, 160, 167 of seed 77's generated plan.)
    static let folderDeletedAfterItsFile = Regression(
        "folderDeletedAfterItsFile",
        Plan(seed: 77, devices: 4, feedPage: 6,
             rates: FaultRates(dropRequest: 0.0, dropResponse: 0.0, duplicate: 0.05, staleFeed: 0.01,
                               slowTransfer: 0.02, corrupt: 0.0),
             steps: [
                Step(.pull, on: 2, seed: 0x4b4f6b4cb490e31a, after: 122000000),
                Step(.mkdir, on: 2, seed: 0x49c95afda779a1f3, after: 2625000000),
                Step(.create, on: 2, seed: 0x952cc1dd54a64c2e, after: 2112000000),
                Step(.push, on: 2, seed: 0x736ea8ca987387c0, after: 3462000000),
                Step(.delete, on: 2, seed: 0x8102dc2c1c0bd4d7, after: 1038000000),
                Step(.rmdir, on: 2, seed: 0x1d7d21fcbded267, after: 0),
             ]))

    /// A device's write lands but its answer is lost; the same device then deletes the file: the create was
    /// forgotten locally (never on the remote, it thought) or the delete met its own newer version as a
    /// concurrent edit, and the file came back.
    /// (Steps 83, 86, 88, 107, 109, 110, 127, 130, 152, 156, 163, 164, 168, 173, 183, 203, 213 of seed 49's
    /// generated plan.)
    static let deleteAfterOwnLostAnswer1 = Regression(
        "deleteAfterOwnLostAnswer1",
        Plan(seed: 49, devices: 3, feedPage: 6,
             rates: FaultRates(dropRequest: 0.07, dropResponse: 0.09, duplicate: 0.0, staleFeed: 0.04,
                               slowTransfer: 0.15, corrupt: 0.01),
             steps: [
                Step(.pull, on: 0, seed: 0xd68ca9cd2b3421fb, after: 973000000),
                Step(.mkdir, on: 0, seed: 0x56185218a0202ed1, after: 1667000000),
                Step(.push, on: 0, seed: 0xc4c1f99309c72664, after: 3088000000),
                Step(.pull, on: 2, seed: 0x2e98b1d4112d8ff9, after: 4601000000),
                Step(.create, on: 0, seed: 0x13b9868aa31fa7cb, after: 1665000000),
                Step(.create, on: 2, seed: 0x7addd45aadb170e5, after: 4141000000),
                Step(.create, on: 0, seed: 0x8c3e04c3360b4253, after: 2679000000),
                Step(.delete, on: 0, seed: 0xed2f5009870b2a9e, after: 0),
                Step(.push, on: 2, seed: 0x1e29d2b469735f39, after: 0),
                Step(.push, on: 0, seed: 0x76f8fc13388f8f0b, after: 4142000000),
                Step(.create, on: 2, seed: 0x74b1696acf77041, after: 954000000),
                Step(.create, on: 0, seed: 0x1dd427dc1809a920, after: 3413000000),
                Step(.pull, on: 2, seed: 0x314ee419f0f1b663, after: 3963000000),
                Step(.push, on: 2, seed: 0xbf2b7e4e518e9d99, after: 2199000000),
                Step(.pull, on: 0, seed: 0x536d0e79a704c001, after: 4784000000),
                Step(.mkdir, on: 0, seed: 0xbe0934a7d5699323, after: 992000000),
                Step(.delete, on: 0, seed: 0x14f870925be988ea, after: 4357000000),
             ]))

    /// The same.
    /// (Steps 197, 206, 209, 224, 236, 253, 260 of seed 86's generated plan.)
    static let deleteAfterOwnLostAnswer2 = Regression(
        "deleteAfterOwnLostAnswer2",
        Plan(seed: 86, devices: 4, feedPage: 1,
             rates: FaultRates(dropRequest: 0.1, dropResponse: 0.11, duplicate: 0.09, staleFeed: 0.03,
                               slowTransfer: 0.05, corrupt: 0.03),
             steps: [
                Step(.pull, on: 3, seed: 0x80dc62a2c2067ec4, after: 140000000),
                Step(.create, on: 3, seed: 0x5b7c24376a69ff6c, after: 0),
                Step(.create, on: 3, seed: 0x2c021feb4adf608d, after: 0),
                Step(.beginWrite, on: 3, seed: 0x1341c50f7faa0e07, after: 4007000000),
                Step(.push, on: 3, seed: 0xb0018a5222483829, after: 1157000000),
                Step(.create, on: 3, seed: 0x281efe3c00e93bc9, after: 0),
                Step(.delete, on: 3, seed: 0xaeb5ccfef62eac4c, after: 2680000000),
             ]))

    /// A conflict version fetched (for a promote refused as busy), then the file deleted: the local copy of the
    /// conflict version stayed in the store for ever.
    /// (Steps 22, 35, 42, 49, 52, 74, 80, 85 of seed 18's generated plan.)
    static let deleteKeepsNoConflictCopies = Regression(
        "deleteKeepsNoConflictCopies",
        Plan(seed: 18, devices: 3, feedPage: 3,
             rates: FaultRates(dropRequest: 0.0, dropResponse: 0.1, duplicate: 0.0, staleFeed: 0.06,
                               slowTransfer: 0.01, corrupt: 0.0),
             steps: [
                Step(.pull, on: 1, seed: 0x955d18944a13ec41, after: 2908000000),
                Step(.create, on: 1, seed: 0x1d4f11309a386e5e, after: 1901000000),
                Step(.push, on: 1, seed: 0x6559bf8d20830d63, after: 958000000),
                Step(.write, on: 1, seed: 0xfae7e6a61e58afe1, after: 3145000000),
                Step(.push, on: 1, seed: 0xf8962348b13ff9d0, after: 3211000000),
                Step(.beginWrite, on: 1, seed: 0x7049347b43d0df5, after: 996000000),
                Step(.promote, on: 1, seed: 0x5a68bcff45b702a2, after: 3587000000),
                Step(.delete, on: 1, seed: 0xaa71c44bc0c6b31a, after: 1486000000),
             ]))

    /// Conflict resolved, then the file deleted here; another device's edit brings the file back (edit wins over
    /// delete) with the remote's list, the resolved version included.
    /// (Steps 63, 91, 192, 198, 199, 202, 203, 210, 221, 229, 239, 246 of seed 18's generated plan.)
    static let resolvedConflictStaysResolvedWhenTheFileComesBack = Regression(
        "resolvedConflictStaysResolvedWhenTheFileComesBack",
        Plan(seed: 18, devices: 3, feedPage: 3,
             rates: FaultRates(dropRequest: 0.0, dropResponse: 0.1, duplicate: 0.0, staleFeed: 0.06,
                               slowTransfer: 0.01, corrupt: 0.0),
             steps: [
                Step(.pull, on: 2, seed: 0x37c73897c092b667, after: 4950000000),
                Step(.create, on: 2, seed: 0xf73d343e249d94e0, after: 498000000),
                Step(.push, on: 2, seed: 0x3058a3147a5f2bf1, after: 0),
                Step(.pull, on: 1, seed: 0x655c3711bb3c1d62, after: 3091000000),
                Step(.write, on: 2, seed: 0xbcf3f578a4712fd5, after: 933000000),
                Step(.write, on: 1, seed: 0x5f452f46d917cbea, after: 1883000000),
                Step(.pull, on: 0, seed: 0x6d2c0944d41014d3, after: 1025000000),
                Step(.push, on: 2, seed: 0x7a0531a2751cae52, after: 0),
                Step(.push, on: 1, seed: 0xd556d0719801ffda, after: 4182000000),
                Step(.keepCurrent, on: 1, seed: 0x39d9a87f5b7783a6, after: 0),
                Step(.delete, on: 1, seed: 0xb84ffb81920064d, after: 2874000000),
                Step(.write, on: 0, seed: 0x9604093ba2dc9a33, after: 0),
             ]))

    /// Conflict resolved and the file deleted (the delete landed, carrying the old list); another device's edit
    /// revives the tombstone and took its list, the resolved version included.
    /// (Steps 63, 91, 192, 198, 199, 202, 203, 210, 221, 229, 239, 244, 246 of seed 18's generated plan.)
    static let revivedTombstoneDropsItsConflictList = Regression(
        "revivedTombstoneDropsItsConflictList",
        Plan(seed: 18, devices: 3, feedPage: 3,
             rates: FaultRates(dropRequest: 0.0, dropResponse: 0.1, duplicate: 0.0, staleFeed: 0.06,
                               slowTransfer: 0.01, corrupt: 0.0),
             steps: [
                Step(.pull, on: 2, seed: 0x37c73897c092b667, after: 4950000000),
                Step(.create, on: 2, seed: 0xf73d343e249d94e0, after: 498000000),
                Step(.push, on: 2, seed: 0x3058a3147a5f2bf1, after: 0),
                Step(.pull, on: 1, seed: 0x655c3711bb3c1d62, after: 3091000000),
                Step(.write, on: 2, seed: 0xbcf3f578a4712fd5, after: 933000000),
                Step(.write, on: 1, seed: 0x5f452f46d917cbea, after: 1883000000),
                Step(.pull, on: 0, seed: 0x6d2c0944d41014d3, after: 1025000000),
                Step(.push, on: 2, seed: 0x7a0531a2751cae52, after: 0),
                Step(.push, on: 1, seed: 0xd556d0719801ffda, after: 4182000000),
                Step(.keepCurrent, on: 1, seed: 0x39d9a87f5b7783a6, after: 0),
                Step(.delete, on: 1, seed: 0xb84ffb81920064d, after: 2874000000),
                Step(.push, on: 1, seed: 0x1474ba0f2186d075, after: 2562000000),
                Step(.write, on: 0, seed: 0x9604093ba2dc9a33, after: 0),
             ]))

    /// b renames c.md over a.txt while d writes a.txt (the edit wins: a.txt comes back as "a 2.txt"). A device
    /// that learns both from the feed gave "a.txt" to c.md, then moving the old a.txt to "a 2.txt" removed the
    /// name "a.txt" from the folder's listing: c.md was in the index but not in its folder.
    /// (Steps 81, 82, 85, 110, 120, 138, 147, 178, 203, 209, 222, 271 of seed 20228's generated plan.)
    static let renamedOverThenMovedAway = Regression(
        "renamedOverThenMovedAway",
        Plan(seed: 20228, devices: 4, feedPage: 4,
             rates: FaultRates(dropRequest: 0.01, dropResponse: 0.09, duplicate: 0.01, staleFeed: 0.05,
                               slowTransfer: 0.01, corrupt: 0.0),
             steps: [
                Step(.pull, on: 3, seed: 0x74678abdf201d8a8, after: 0),
                Step(.pull, on: 2, seed: 0x30e0adc53ee70ad8, after: 3146000000),
                Step(.create, on: 3, seed: 0x91be3c0004327311, after: 3947000000),
                Step(.push, on: 3, seed: 0x98ede329855418d4, after: 3498000000),
                Step(.create, on: 3, seed: 0x168145a727acd916, after: 4794000000),
                Step(.beginWrite, on: 3, seed: 0x1ea87b9c83456a19, after: 2219000000),
                Step(.create, on: 2, seed: 0x772aeaddfa559135, after: 0),
                Step(.push, on: 2, seed: 0xd3fe38e6ae85babd, after: 2833000000),
                Step(.create, on: 3, seed: 0x8937e2c2101760ac, after: 2832000000),
                Step(.push, on: 3, seed: 0x483e1e1f262d36, after: 266000000),
                Step(.pull, on: 1, seed: 0xb4dd9809a41b46f3, after: 2891000000),
                Step(.rename, on: 1, seed: 0x751f5efeed891252, after: 191000000),
             ]))

    /// A file renamed over another elsewhere took its name here and detached the stale one; the stale one's next
    /// version (renamed away) then removed the name from the directory, and the new file was lost from the tree
    /// (never listed, never fetched).
    /// (Steps 11, 12, 28, 35, 38, 41, 47, 54, 56, 66, 86, 88, 94, 95, 128, 129, 130, 131, 132, 137, 138, 157,
    /// 158, 161, 171, 176, 177, 178, 179, 184, 185, 200, 201, 206, 207, 208, 209, 214, 215, 250, 251 of seed
    /// 10091's generated plan.)
    static let renameOfADetachedItemKeepsTheNewOwnersName = Regression(
        "renameOfADetachedItemKeepsTheNewOwnersName",
        Plan(seed: 10091, devices: 4, feedPage: 6,
             rates: FaultRates(dropRequest: 0.04, dropResponse: 0.11, duplicate: 0.05, staleFeed: 0.05,
                               slowTransfer: 0.11, corrupt: 0.01),
             steps: [
                Step(.pull, on: 2, seed: 0x196c531c906ea93, after: 3387000000),
                Step(.pull, on: 1, seed: 0x284ad442c943048a, after: 1325000000),
                Step(.pull, on: 3, seed: 0x7f3177143b1549bb, after: 4528000000),
                Step(.create, on: 1, seed: 0x5cc90e28d28bbc23, after: 960000000),
                Step(.create, on: 1, seed: 0x7d48666aa5d6b0eb, after: 4119000000),
                Step(.mkdir, on: 2, seed: 0x4ebc9f5518b2f27, after: 2486000000),
                Step(.push, on: 1, seed: 0x4fc33e7ca6dd6b1f, after: 1446000000),
                Step(.create, on: 1, seed: 0xdd2f05f3ca6fc147, after: 3684000000),
                Step(.mkdir, on: 2, seed: 0x33f1d60192d6f907, after: 270000000),
                Step(.mkdir, on: 1, seed: 0x1cc648a3762e3917, after: 886000000),
                Step(.push, on: 1, seed: 0x4ee9ec3eea2ff7a6, after: 367000000),
                Step(.push, on: 2, seed: 0xd982f29aade0408f, after: 111000000),
                Step(.push, on: 1, seed: 0x78b984efa5a5a545, after: 3915000000),
                Step(.create, on: 3, seed: 0xba7798ab0a57e8a, after: 88000000),
                Step(.pull, on: 0, seed: 0x5cb2f4af12f5dc16, after: 2951000000),
                Step(.create, on: 2, seed: 0xef5f1fb2a93d0a95, after: 2911000000),
                Step(.truncate, on: 3, seed: 0x881310714ceeae68, after: 1685000000),
                Step(.rmdir, on: 0, seed: 0x9107590adcd0bae9, after: 3578000000),
                Step(.beginWrite, on: 0, seed: 0xe6c1d09f0218cca4, after: 558000000),
                Step(.delete, on: 0, seed: 0x1cc6c5f8cff682c6, after: 345000000),
                Step(.pull, on: 2, seed: 0xbb7b00e931efbece, after: 2662000000),
                Step(.create, on: 0, seed: 0x658efdd0272de012, after: 1303000000),
                Step(.delete, on: 1, seed: 0x782f6b957bbe2714, after: 0),
                Step(.write, on: 1, seed: 0xe23ade972055bf14, after: 2772000000),
                Step(.chmod, on: 0, seed: 0x9482e66fe3f691c, after: 4565000000),
                Step(.push, on: 3, seed: 0x740bdf0b26c64225, after: 4847000000),
                Step(.push, on: 3, seed: 0xfe719b87357194e7, after: 1153000000),
                Step(.evict, on: 2, seed: 0xb596d5542400af7e, after: 2720000000),
                Step(.mkdir, on: 3, seed: 0x57b0d69740404aef, after: 3818000000),
                Step(.push, on: 2, seed: 0x4efb544940c47f6d, after: 2985000000),
                Step(.mkdir, on: 3, seed: 0xa4cee2d813967041, after: 2769000000),
                Step(.pull, on: 1, seed: 0xe4f21bc9ce23e068, after: 3503000000),
                Step(.pull, on: 0, seed: 0xfe4229c9a6ca5cda, after: 4954000000),
                Step(.create, on: 0, seed: 0x54f8e2c80860cb44, after: 1840000000),
                Step(.mkdir, on: 3, seed: 0x11a9ea9818779e41, after: 4194000000),
                Step(.discard, on: 2, seed: 0x954f2e14713f9199, after: 0),
                Step(.rename, on: 0, seed: 0x5d2b453a9e8f4cf, after: 3926000000),
                Step(.truncate, on: 3, seed: 0x31067037f35f473d, after: 3917000000),
                Step(.download, on: 2, seed: 0xf1f26a25509ce17e, after: 1574000000),
                Step(.beginWrite, on: 0, seed: 0x108d97db02ece09d, after: 4614000000),
                Step(.endWrite, on: 0, seed: 0x4db4580df5ca78e4, after: 1895000000),
             ]))

    /// A device loses a conflict and lists its content as a conflict version, but that list is not pushed yet;
    /// its next push meets a newer remote version and took the remote's list, dropping the version.
    /// (Steps 4, 24, 45, 68, 71, 85, 86, 95, 97, 98, 102, 114, 118 of seed 11502's generated plan.)
    static let unpushedConflictVersionSurvivesANewerRemoteList1 = Regression(
        "unpushedConflictVersionSurvivesANewerRemoteList1",
        Plan(seed: 11502, devices: 4, feedPage: 3,
             rates: FaultRates(dropRequest: 0.03, dropResponse: 0.0, duplicate: 0.0, staleFeed: 0.04,
                               slowTransfer: 0.16, corrupt: 0.0),
             steps: [
                Step(.pull, on: 1, seed: 0x914bdc722d36ccbd, after: 4746000000),
                Step(.create, on: 1, seed: 0xadc212de98bfb6aa, after: 1788000000),
                Step(.mkdir, on: 1, seed: 0x84fa324b31f4db2a, after: 1609000000),
                Step(.create, on: 1, seed: 0x935ed905b90fb02a, after: 1525000000),
                Step(.push, on: 1, seed: 0x4a3f9cf7f3a0033c, after: 2376000000),
                Step(.write, on: 1, seed: 0xa80f89202c79c18e, after: 2993000000),
                Step(.pull, on: 2, seed: 0xbc6a598d362092b8, after: 3075000000),
                Step(.append, on: 2, seed: 0xef69a614b07743f4, after: 2613000000),
                Step(.push, on: 2, seed: 0x2e7b4fa84b2ac58f, after: 837000000),
                Step(.pull, on: 0, seed: 0xbe58dadffb2b4ceb, after: 2405000000),
                Step(.beginWrite, on: 0, seed: 0xf9064fc5ca4b0415, after: 288000000),
                Step(.write, on: 1, seed: 0x221cfec2ac11435c, after: 3749000000),
                Step(.push, on: 1, seed: 0x61d6a2ae4c012cee, after: 3791000000),
             ]))

    /// The same.
    /// (Steps 42, 45, 48, 55, 64, 77, 79, 160, 163, 166, 171, 172, 184, 194 of seed 11067's generated plan.)
    static let unpushedConflictVersionSurvivesANewerRemoteList2 = Regression(
        "unpushedConflictVersionSurvivesANewerRemoteList2",
        Plan(seed: 11067, devices: 4, feedPage: 4,
             rates: FaultRates(dropRequest: 0.05, dropResponse: 0.02, duplicate: 0.04, staleFeed: 0.07,
                               slowTransfer: 0.15, corrupt: 0.04),
             steps: [
                Step(.pull, on: 3, seed: 0xc3ac4641c9364f8f, after: 2025000000),
                Step(.create, on: 3, seed: 0x557b65648ccdd9ad, after: 3531000000),
                Step(.pull, on: 1, seed: 0xa0213cadb9d2bf64, after: 638000000),
                Step(.create, on: 1, seed: 0x605f6d63a40ac73e, after: 598000000),
                Step(.push, on: 3, seed: 0x1b8c267db38a35a1, after: 4152000000),
                Step(.push, on: 1, seed: 0x6f32684cd8a669a7, after: 1430000000),
                Step(.pull, on: 3, seed: 0x398661e3cd9b4e6, after: 3914000000),
                Step(.pull, on: 1, seed: 0x3ba5e468a4c7785e, after: 3542000000),
                Step(.pull, on: 2, seed: 0x21a8b0e1d06da392, after: 0),
                Step(.write, on: 1, seed: 0x11ecf46819bec627, after: 1334000000),
                Step(.write, on: 2, seed: 0x3cd1d20f924f3b96, after: 2727000000),
                Step(.write, on: 3, seed: 0xd26de32d1c34f444, after: 305000000),
                Step(.push, on: 3, seed: 0x1cc23a5918e7b561, after: 4709000000),
                Step(.push, on: 2, seed: 0x5b7d1ebacd963138, after: 1534000000),
             ]))

    /// A write (create or update) lands but its answer is lost; another device sees it and deletes the file; the
    /// retry met the write itself (412) and wrote it again, a newer version that beat the delete.
    /// (Steps 29, 37, 47, 78, 82, 94, 107, 108 of seed 11509's generated plan.)
    static let landedWriteNotWrittenAgain1 = Regression(
        "landedWriteNotWrittenAgain1",
        Plan(seed: 11509, devices: 4, feedPage: 2,
             rates: FaultRates(dropRequest: 0.07, dropResponse: 0.09, duplicate: 0.09, staleFeed: 0.0,
                               slowTransfer: 0.07, corrupt: 0.01),
             steps: [
                Step(.pull, on: 0, seed: 0xb5df76efe3bbff7, after: 872000000),
                Step(.create, on: 0, seed: 0xcbb5d87eba918ecd, after: 3856000000),
                Step(.push, on: 0, seed: 0xd206ef3443045140, after: 1124000000),
                Step(.delete, on: 0, seed: 0xb26a08131414f3c2, after: 3401000000),
                Step(.create, on: 0, seed: 0x255720b32980d471, after: 4661000000),
                Step(.push, on: 0, seed: 0x8ce782ce2a1d91a, after: 340000000),
                Step(.pull, on: 1, seed: 0x25679e4f36453696, after: 3281000000),
                Step(.delete, on: 1, seed: 0x5815548c3dd1c31c, after: 3860000000),
             ]))

    /// The same.
    /// (Steps 32, 34, 83, 84, 107, 158, 159, 173, 193, 197, 199, 203, 207, 223, 226, 231, 232, 264, 265, 268 of
    /// seed 11251's generated plan.)
    static let landedWriteNotWrittenAgain2 = Regression(
        "landedWriteNotWrittenAgain2",
        Plan(seed: 11251, devices: 3, feedPage: 5,
             rates: FaultRates(dropRequest: 0.05, dropResponse: 0.05, duplicate: 0.0, staleFeed: 0.06,
                               slowTransfer: 0.06, corrupt: 0.03),
             steps: [
                Step(.pull, on: 1, seed: 0xcad8cd92722cf845, after: 4735000000),
                Step(.pull, on: 2, seed: 0xe6cec73d44842c7b, after: 4332000000),
                Step(.mkdir, on: 2, seed: 0xbe66b261e0af50b6, after: 110000000),
                Step(.create, on: 1, seed: 0x530b5becc10d975d, after: 4249000000),
                Step(.mkdir, on: 2, seed: 0xb677bd477c99902a, after: 502000000),
                Step(.mkdir, on: 2, seed: 0x79781856968dc7a6, after: 1154000000),
                Step(.create, on: 1, seed: 0xbcccd7f35670a628, after: 0),
                Step(.create, on: 2, seed: 0xd5ee00c7875d3388, after: 4415000000),
                Step(.create, on: 1, seed: 0x882f5ee66fb29121, after: 345000000),
                Step(.push, on: 1, seed: 0x6fa14b8fa983518e, after: 3704000000),
                Step(.create, on: 2, seed: 0xc672fbef277e2784, after: 1109000000),
                Step(.create, on: 2, seed: 0x3c36ff09ccea1735, after: 481000000),
                Step(.append, on: 2, seed: 0xe43d5ed1f972159c, after: 0),
                Step(.create, on: 2, seed: 0x21d1347c87a6102, after: 2914000000),
                Step(.push, on: 2, seed: 0x17cc785bcc710fd4, after: 1190000000),
                Step(.push, on: 2, seed: 0xbf15aff986f027ba, after: 4056000000),
                Step(.push, on: 2, seed: 0x4c47a76e147717b4, after: 338000000),
                Step(.pull, on: 0, seed: 0x580741a1f36202ae, after: 2193000000),
                Step(.push, on: 2, seed: 0x8fe3c69171852999, after: 0),
                Step(.delete, on: 0, seed: 0x4ed65228449e9617, after: 1825000000),
             ]))

    /// The same.
    /// (Steps 5, 19, 132, 212, 289, 291, 301, 309, 338, 341, 348, 349, 358, 360, 390, 391, 392 of seed 10487's
    /// generated plan.)
    static let landedWriteNotWrittenAgain3 = Regression(
        "landedWriteNotWrittenAgain3",
        Plan(seed: 10487, devices: 4, feedPage: 4,
             rates: FaultRates(dropRequest: 0.08, dropResponse: 0.04, duplicate: 0.05, staleFeed: 0.0,
                               slowTransfer: 0.12, corrupt: 0.03),
             steps: [
                Step(.pull, on: 2, seed: 0xf5c24d583bc4633b, after: 0),
                Step(.mkdir, on: 2, seed: 0x979d7a3e9043a745, after: 4040000000),
                Step(.create, on: 2, seed: 0x5cca7cf821deb2ae, after: 4726000000),
                Step(.push, on: 2, seed: 0x4c62912aeea4de9a, after: 4216000000),
                Step(.write, on: 2, seed: 0x1f6499535d8efd26, after: 414000000),
                Step(.pull, on: 0, seed: 0x22acf2f1652342b4, after: 1972000000),
                Step(.mkdir, on: 2, seed: 0xc98b18f54388c383, after: 3399000000),
                Step(.create, on: 2, seed: 0xf1823152c66b02f6, after: 2275000000),
                Step(.delete, on: 0, seed: 0x48e48cdbb0db3ef1, after: 3507000000),
                Step(.create, on: 2, seed: 0xca51988f695fe4db, after: 1911000000),
                Step(.push, on: 2, seed: 0x175e228326852e61, after: 1135000000),
                Step(.create, on: 0, seed: 0x41638691b0f529ae, after: 1890000000),
                Step(.push, on: 2, seed: 0xb9e70bd0892881c8, after: 2578000000),
                Step(.pull, on: 0, seed: 0x6030fea3b96b518b, after: 877000000),
                Step(.delete, on: 0, seed: 0xf51414dbeb451feb, after: 2246000000),
                Step(.download, on: 0, seed: 0x189e29892792d4e9, after: 3819000000),
                Step(.push, on: 2, seed: 0x515df1b3ea7e351b, after: 4499000000),
             ]))

    /// The same.
    /// (Steps 25, 27, 32, 44, 45, 52, 57, 58, 60, 64, 65, 66, 76, 77, 80, 85, 90, 101, 103, 105, 119, 135, 137,
    /// 159, 160, 162, 179, 181, 183, 202, 203 of seed 10748's generated plan.)
    static let landedWriteNotWrittenAgain4 = Regression(
        "landedWriteNotWrittenAgain4",
        Plan(seed: 10748, devices: 3, feedPage: 3,
             rates: FaultRates(dropRequest: 0.06, dropResponse: 0.07, duplicate: 0.07, staleFeed: 0.01,
                               slowTransfer: 0.0, corrupt: 0.02),
             steps: [
                Step(.pull, on: 1, seed: 0x89f4b030dcecd40a, after: 3993000000),
                Step(.pull, on: 0, seed: 0x12ceaec533c89de3, after: 3468000000),
                Step(.create, on: 1, seed: 0x5cfdfed56f3db9eb, after: 1838000000),
                Step(.mkdir, on: 0, seed: 0xf7b608c7242f7548, after: 3981000000),
                Step(.mkdir, on: 0, seed: 0xc5ebbd7e4aee615d, after: 4301000000),
                Step(.pull, on: 2, seed: 0xbeff7055a1c8f8e0, after: 3516000000),
                Step(.push, on: 1, seed: 0x3057c22f4d832809, after: 2909000000),
                Step(.create, on: 0, seed: 0x8a3dd0a561578259, after: 0),
                Step(.delete, on: 1, seed: 0x1af9e7d9553eaed6, after: 4951000000),
                Step(.create, on: 2, seed: 0xaccfb9503cc9a9cd, after: 416000000),
                Step(.create, on: 2, seed: 0xf512a68fc0b81d50, after: 3096000000),
                Step(.push, on: 0, seed: 0x3e4b03efbb0279a5, after: 3557000000),
                Step(.pull, on: 0, seed: 0xcab7ef2f58fda2d0, after: 2454000000),
                Step(.delete, on: 2, seed: 0x3746f0354742e614, after: 2114000000),
                Step(.push, on: 0, seed: 0xd3f77cc61dd91353, after: 1962000000),
                Step(.push, on: 2, seed: 0x79f19da3983b42cd, after: 563000000),
                Step(.pull, on: 1, seed: 0x41f1fb156b91c9e4, after: 3317000000),
                Step(.mkdir, on: 1, seed: 0xdd4c9318972e8166, after: 4169000000),
                Step(.rename, on: 1, seed: 0x50f477521ecfd486, after: 4182000000),
                Step(.push, on: 1, seed: 0xa1042ce3e6f47c9, after: 446000000),
                Step(.create, on: 0, seed: 0x258cda5091aaa2b6, after: 0),
                Step(.delete, on: 0, seed: 0x37a805e1cf717567, after: 0),
                Step(.create, on: 0, seed: 0xe46c5ff3feba768e, after: 4091000000),
                Step(.append, on: 0, seed: 0xe1ff2c5ce2bfe5c1, after: 0),
                Step(.write, on: 0, seed: 0x64d20d61a97212b7, after: 3611000000),
                Step(.push, on: 1, seed: 0x84829eb7c178470c, after: 1912000000),
                Step(.push, on: 0, seed: 0x1b0178fad7620db6, after: 3782000000),
                Step(.pull, on: 1, seed: 0x506d1c0c0f565109, after: 2029000000),
                Step(.create, on: 1, seed: 0xe4a02c4b4ee9973b, after: 2794000000),
                Step(.delete, on: 1, seed: 0x7d215c42a1ed70f9, after: 3339000000),
                Step(.delete, on: 1, seed: 0xd03942c6e686b37, after: 3496000000),
             ]))

    /// A create lands but its answer is lost; another device empties the file; the create's retry took the empty
    /// content for its own base (the placeholder of a new file) and wrote over the emptied file.
    /// (Steps 74, 109, 190, 249, 254 of seed 11199's generated plan.)
    static let createWhoseAnswerWasLostMeetsAnEmptiedFile1 = Regression(
        "createWhoseAnswerWasLostMeetsAnEmptiedFile1",
        Plan(seed: 11199, devices: 4, feedPage: 6,
             rates: FaultRates(dropRequest: 0.08, dropResponse: 0.06, duplicate: 0.01, staleFeed: 0.02,
                               slowTransfer: 0.04, corrupt: 0.01),
             steps: [
                Step(.pull, on: 1, seed: 0xac79766be9815886, after: 1774000000),
                Step(.create, on: 1, seed: 0x9c01a41c3b11af4e, after: 3328000000),
                Step(.push, on: 1, seed: 0x1fe723cbfc0321b9, after: 3219000000),
                Step(.pull, on: 0, seed: 0xbbb34c087e399f24, after: 2153000000),
                Step(.truncate, on: 0, seed: 0xd3ff04746c278665, after: 1467000000),
             ]))

    /// The same, a longer trace.
    /// (Steps 66, 70, 73, 74, 98, 102, 105, 108, 109, 169, 173, 175, 180, 186, 189, 202, 247, 249, 254 of seed
    /// 11199's generated plan.)
    static let createWhoseAnswerWasLostMeetsAnEmptiedFile2 = Regression(
        "createWhoseAnswerWasLostMeetsAnEmptiedFile2",
        Plan(seed: 11199, devices: 4, feedPage: 6,
             rates: FaultRates(dropRequest: 0.08, dropResponse: 0.06, duplicate: 0.01, staleFeed: 0.02,
                               slowTransfer: 0.04, corrupt: 0.01),
             steps: [
                Step(.pull, on: 3, seed: 0xcdf48050534b08f6, after: 4607000000),
                Step(.create, on: 3, seed: 0xf00b1f93503943d8, after: 123000000),
                Step(.pull, on: 2, seed: 0xe843314694dd2cc, after: 1136000000),
                Step(.pull, on: 1, seed: 0xac79766be9815886, after: 1774000000),
                Step(.mkdir, on: 3, seed: 0xca35748a3b0b4c54, after: 1923000000),
                Step(.beginWrite, on: 3, seed: 0x8531148e59da791f, after: 1441000000),
                Step(.create, on: 3, seed: 0xe04219f25d8295f7, after: 4885000000),
                Step(.create, on: 2, seed: 0x521e425c46c1b96b, after: 1133000000),
                Step(.create, on: 1, seed: 0x9c01a41c3b11af4e, after: 3328000000),
                Step(.append, on: 1, seed: 0x64d81c6c6ebf9a8a, after: 515000000),
                Step(.push, on: 3, seed: 0x3e4834b5d085209f, after: 3652000000),
                Step(.create, on: 1, seed: 0x9fcd87c6ee45cb0d, after: 2327000000),
                Step(.append, on: 2, seed: 0xa59b20f45299e4aa, after: 3603000000),
                Step(.create, on: 2, seed: 0xd2e132a0467be15c, after: 144000000),
                Step(.create, on: 3, seed: 0x2897bc63a67f956c, after: 0),
                Step(.push, on: 3, seed: 0x8b900e0f8e3ce6d8, after: 750000000),
                Step(.push, on: 3, seed: 0x7831f7edb215ea43, after: 3082000000),
                Step(.pull, on: 0, seed: 0xbbb34c087e399f24, after: 2153000000),
                Step(.truncate, on: 0, seed: 0xd3ff04746c278665, after: 1467000000),
             ]))

    /// b's create lands but its answer is lost; c edits the file, d sees that and deletes it; b's retry met c's
    /// version as a concurrent edit of its create (a conflict, a newer version) and the file came back.
    /// (Steps 4, 7, 8, 14, 24, 37, 39, 43, 51, 53, 63, 65, 67, 73, 74, 100, 122, 130, 136, 137 of seed 11594's
    /// generated plan.)
    static let landedCreateChangedElsewhere = Regression(
        "landedCreateChangedElsewhere",
        Plan(seed: 11594, devices: 4, feedPage: 3,
             rates: FaultRates(dropRequest: 0.06, dropResponse: 0.08, duplicate: 0.06, staleFeed: 0.05,
                               slowTransfer: 0.14, corrupt: 0.0),
             steps: [
                Step(.pull, on: 0, seed: 0x44a881b7072daff0, after: 2450000000),
                Step(.mkdir, on: 0, seed: 0xbb52d7569524a018, after: 4505000000),
                Step(.create, on: 0, seed: 0x200fbe7980c39bf, after: 0),
                Step(.pull, on: 3, seed: 0xaed9b74d892612b0, after: 385000000),
                Step(.pull, on: 2, seed: 0x17011967c58ffd8e, after: 3956000000),
                Step(.pull, on: 1, seed: 0xf502119461d798d2, after: 0),
                Step(.push, on: 0, seed: 0x29b705605a776f88, after: 1793000000),
                Step(.create, on: 3, seed: 0xbaa3058b1d8a0b3f, after: 4804000000),
                Step(.create, on: 2, seed: 0x63cc8b83313c8892, after: 892000000),
                Step(.create, on: 3, seed: 0xd19ff850c9bed2e1, after: 928000000),
                Step(.create, on: 1, seed: 0xf8960eac7ef0d929, after: 2326000000),
                Step(.push, on: 3, seed: 0x14ad398c67ae5d93, after: 3196000000),
                Step(.pull, on: 1, seed: 0x6b6fdc97e575f8ba, after: 1287000000),
                Step(.push, on: 1, seed: 0x593006e8a35783d1, after: 4480000000),
                Step(.mkdir, on: 3, seed: 0x62e54ae18a488e42, after: 4969000000),
                Step(.create, on: 3, seed: 0x2d692f16cd21822, after: 2429000000),
                Step(.push, on: 2, seed: 0x4adc9f0e2db9d65e, after: 4695000000),
                Step(.pull, on: 3, seed: 0xbfd13f38b14d1ad5, after: 4042000000),
                Step(.move, on: 3, seed: 0xaf3bdb6d7c7af654, after: 1841000000),
                Step(.delete, on: 3, seed: 0x14f1f2a48528d4c9, after: 19000000),
             ]))

    /// a's append lands but its answer is lost; c moves the file, then deletes it; a's retry met the tombstone,
    /// which held a's content but not a's (stale, unchanged) place, and revived the file.
    /// (Steps 18, 20, 39, 51, 64, 67, 69, 70, 77, 83, 90, 93, 98, 102, 105, 110, 111, 117, 122, 124, 128, 132,
    /// 136, 137, 141, 142, 156, 157, 162, 163, 164, 165, 166, 167, 174, 189, 190, 194, 195, 203, 210, 211, 212,
    /// 219, 220, 221 of seed 11415's generated plan.)
    static let landedWriteMovedThenDeleted = Regression(
        "landedWriteMovedThenDeleted",
        Plan(seed: 11415, devices: 4, feedPage: 1,
             rates: FaultRates(dropRequest: 0.05, dropResponse: 0.02, duplicate: 0.06, staleFeed: 0.06,
                               slowTransfer: 0.15, corrupt: 0.04),
             steps: [
                Step(.pull, on: 0, seed: 0x73bd6ef9e959ff0e, after: 1287000000),
                Step(.pull, on: 2, seed: 0x3e87ec0ec0af89c4, after: 2145000000),
                Step(.create, on: 2, seed: 0x533c53feb138346, after: 3909000000),
                Step(.pull, on: 3, seed: 0x8dd6ce6b14284c9f, after: 0),
                Step(.create, on: 3, seed: 0x11e264dfb358acbd, after: 1233000000),
                Step(.mkdir, on: 0, seed: 0x7b710d59761581be, after: 1399000000),
                Step(.mkdir, on: 2, seed: 0x1c58aab88a7567fc, after: 2653000000),
                Step(.push, on: 2, seed: 0x6b6e8034960e46fc, after: 4132000000),
                Step(.push, on: 0, seed: 0x169bbc80d1a5728e, after: 941000000),
                Step(.create, on: 2, seed: 0xd3e7453643b930a9, after: 158000000),
                Step(.pull, on: 2, seed: 0x30876ef97ee1ae8a, after: 4060000000),
                Step(.push, on: 2, seed: 0x3145751dac2e805e, after: 2036000000),
                Step(.create, on: 2, seed: 0xc8d8628fe69e4e6e, after: 1370000000),
                Step(.pull, on: 3, seed: 0xd8802f0a9b521620, after: 4196000000),
                Step(.pull, on: 0, seed: 0x48d66d7f5ab4d3e, after: 767000000),
                Step(.create, on: 0, seed: 0xd40e8a74585d0e36, after: 0),
                Step(.push, on: 0, seed: 0x91322727e7fe69c1, after: 4883000000),
                Step(.append, on: 0, seed: 0x39057d5768ec44a2, after: 3585000000),
                Step(.move, on: 3, seed: 0x81a9750c099aa6f7, after: 1136000000),
                Step(.push, on: 3, seed: 0x736839d9c8367129, after: 2071000000),
                Step(.create, on: 0, seed: 0x8c314834ef13354, after: 440000000),
                Step(.push, on: 0, seed: 0x942821bf6747d37f, after: 3898000000),
                Step(.pull, on: 2, seed: 0x16cd361aa6f25ab4, after: 2211000000),
                Step(.chmod, on: 3, seed: 0x1dbe1b8f59d99c9e, after: 117000000),
                Step(.push, on: 2, seed: 0xd0d15cabc65cd57a, after: 973000000),
                Step(.pull, on: 0, seed: 0x6654f171a03e42ea, after: 2849000000),
                Step(.push, on: 3, seed: 0xca445088116a5164, after: 990000000),
                Step(.pull, on: 2, seed: 0x13640e2964035eef, after: 1441000000),
                Step(.write, on: 0, seed: 0x784bb68273dde242, after: 1473000000),
                Step(.pull, on: 1, seed: 0x7d5e507144e785ab, after: 2586000000),
                Step(.move, on: 3, seed: 0xec20b2f9fda0cd82, after: 2766000000),
                Step(.mkdir, on: 3, seed: 0x2c9ede0816783fc6, after: 1541000000),
                Step(.pull, on: 1, seed: 0x119ff67ac0f714ef, after: 2707000000),
                Step(.move, on: 2, seed: 0x8afbb26b69f85ea2, after: 2114000000),
                Step(.heal, on: 0, seed: 0x11c93b16f07b0dd8, after: 3045000000),
                Step(.write, on: 3, seed: 0x997dc7423a7863b2, after: 4172000000),
                Step(.beginWrite, on: 0, seed: 0x7709c526dd05ccdb, after: 4269000000),
                Step(.push, on: 3, seed: 0x5b96dbea745dc089, after: 4859000000),
                Step(.pull, on: 2, seed: 0x9445bf9283cba7b0, after: 428000000),
                Step(.push, on: 2, seed: 0x2f12cf58e0272c54, after: 487000000),
                Step(.delete, on: 2, seed: 0xadc8c792bec1d738, after: 1153000000),
                Step(.create, on: 1, seed: 0xdff29d7b2bf98aac, after: 1344000000),
                Step(.create, on: 0, seed: 0x9cb6ab7cb7bdf163, after: 2646000000),
                Step(.download, on: 0, seed: 0x1875b3383663afd8, after: 196000000),
                Step(.push, on: 2, seed: 0xe4461805e0cee6af, after: 1765000000),
                Step(.move, on: 1, seed: 0xeedc43fdd8da0893, after: 3073000000),
             ]))

    /// Model: a deletes x/x/notes then rmdir x/x while d edits notes unseen; the edit wins and brings x/x back
    /// with it, but the model counted only creates and moves into a directory against its delete.
    /// (Steps 16, 18, 39, 75, 88, 149, 152, 159, 160, 169, 173, 194, 218 of seed 11895's generated plan.)
    static let editBelowDeletedFolderContestsIt = Regression(
        "editBelowDeletedFolderContestsIt",
        Plan(seed: 11895, devices: 4, feedPage: 3,
             rates: FaultRates(dropRequest: 0.08, dropResponse: 0.01, duplicate: 0.0, staleFeed: 0.07,
                               slowTransfer: 0.02, corrupt: 0.01),
             steps: [
                Step(.pull, on: 1, seed: 0x23384c37f5e79ce3, after: 3156000000),
                Step(.mkdir, on: 1, seed: 0xdc876ac4dbf111cc, after: 0),
                Step(.push, on: 1, seed: 0xafba2151c583a642, after: 4348000000),
                Step(.pull, on: 0, seed: 0x58f53db2da4a5af, after: 4282000000),
                Step(.mkdir, on: 0, seed: 0x4f754361691782e0, after: 3711000000),
                Step(.mkdir, on: 0, seed: 0xb1b5953d463008c4, after: 2047000000),
                Step(.push, on: 0, seed: 0x9d10faa90ca46066, after: 0),
                Step(.create, on: 0, seed: 0xed4a8e128773d8f2, after: 0),
                Step(.push, on: 0, seed: 0x9d3c3eb83de977a3, after: 1293000000),
                Step(.delete, on: 0, seed: 0xe0ffc47051c12426, after: 0),
                Step(.pull, on: 3, seed: 0xf41d27d6513d7652, after: 3055000000),
                Step(.write, on: 3, seed: 0x36143ed79128b77f, after: 525000000),
                Step(.rmdir, on: 0, seed: 0x1a61b53a59aedc37, after: 4533000000),
             ]))

    /// b deletes b.txt while c renames it to notes; b then renames another file to notes. b's delete meets c's
    /// rename (edit wins), and the file came back under a new name: a change newer than what d deleted.
    /// (Steps 60, 99, 109, 117, 119, 121, 142, 144, 176, 177, 193 of seed 31630's generated plan.)
    static let restoredItemKeepsItsRemoteName = Regression(
        "restoredItemKeepsItsRemoteName",
        Plan(seed: 31630, devices: 4, feedPage: 5,
             rates: FaultRates(dropRequest: 0.08, dropResponse: 0.08, duplicate: 0.03, staleFeed: 0.04,
                               slowTransfer: 0.14, corrupt: 0.02),
             steps: [
                Step(.pull, on: 2, seed: 0xfe6e3c48bf84a1a, after: 3181000000),
                Step(.create, on: 2, seed: 0x7240649a1df464bd, after: 4460000000),
                Step(.push, on: 2, seed: 0xf81efc22883e683d, after: 2060000000),
                Step(.rename, on: 2, seed: 0xfb2ad03630448ecb, after: 4404000000),
                Step(.pull, on: 1, seed: 0xc539a92de1182bb8, after: 837000000),
                Step(.delete, on: 1, seed: 0x643eeb2eb220613e, after: 2168000000),
                Step(.create, on: 1, seed: 0x2ce6c4a8425fb1b, after: 4407000000),
                Step(.push, on: 2, seed: 0xbc5fc799230f0cce, after: 3744000000),
                Step(.pull, on: 3, seed: 0x7406b4a90cdf33be, after: 1650000000),
                Step(.delete, on: 3, seed: 0x82ef5bbe56ad3e5a, after: 507000000),
                Step(.rename, on: 1, seed: 0x8725e5059caef0c2, after: 1504000000),
             ]))

    /// c's mkdir lands but its answer is lost; c adds a file to it; a deletes the empty folder. c revived the
    /// folder with a create (If-None-Match), refused by the tombstone for ever.
    /// (Steps 14, 37, 117, 171, 203, 207 of seed 41116's generated plan.)
    static let folderRevivedOverTombstone = Regression(
        "folderRevivedOverTombstone",
        Plan(seed: 41116, devices: 4, feedPage: 5,
             rates: FaultRates(dropRequest: 0.11, dropResponse: 0.08, duplicate: 0.07, staleFeed: 0.06,
                               slowTransfer: 0.1, corrupt: 0.04),
             steps: [
                Step(.pull, on: 2, seed: 0xc0513e8eb2395e3f, after: 1734000000),
                Step(.mkdir, on: 2, seed: 0x2c890e2b9d718e4b, after: 1707000000),
                Step(.create, on: 2, seed: 0x3e42dde4f5d00224, after: 1232000000),
                Step(.push, on: 2, seed: 0x9fc89854c980c766, after: 4080000000),
                Step(.pull, on: 0, seed: 0x3be5e347afb08372, after: 1631000000),
                Step(.rmdir, on: 0, seed: 0xe92e4ebbe351feec, after: 1638000000),
             ]))

    /// A file moved out of a folder, the folder removed, the file deleted: the folder's delete went first, met
    /// its child still there (409) and brought the folder back.
    /// (Steps 42, 58, 74, 92, 108, 109, 118, 168, 226, 228, 256, 260 of seed 52980's generated plan.)
    static let folderDeleteWaitsForItsChildMovedOut = Regression(
        "folderDeleteWaitsForItsChildMovedOut",
        Plan(seed: 52980, devices: 3, feedPage: 1,
             rates: FaultRates(dropRequest: 0.1, dropResponse: 0.05, duplicate: 0.03, staleFeed: 0.01,
                               slowTransfer: 0.12, corrupt: 0.05),
             steps: [
                Step(.pull, on: 0, seed: 0xe01f2d9c60a6e6cc, after: 3989000000),
                Step(.mkdir, on: 0, seed: 0x2f38e17295422f94, after: 3896000000),
                Step(.mkdir, on: 0, seed: 0x449bc700e15cf873, after: 1645000000),
                Step(.rmdir, on: 0, seed: 0x208ce3ddd1b4527b, after: 1593000000),
                Step(.create, on: 0, seed: 0xff44d6389f043380, after: 1713000000),
                Step(.create, on: 0, seed: 0x194b9db85b2a1931, after: 1819000000),
                Step(.create, on: 0, seed: 0x18facf60b672a9eb, after: 0),
                Step(.delete, on: 0, seed: 0xbcc40a86987e4712, after: 1790000000),
                Step(.push, on: 0, seed: 0xcdb24323e0030a47, after: 718000000),
                Step(.move, on: 0, seed: 0xb25af3657f3ce02a, after: 4379000000),
                Step(.rmdir, on: 0, seed: 0x3b2bbcc8d9c22fb, after: 494000000),
                Step(.delete, on: 0, seed: 0x69c8fdd392b9c238, after: 961000000),
             ]))

    /// b's folder x was renamed and deleted by c while b added a file to it, and a made a new x meanwhile: b gave
    /// the name x to a's folder, then revived its own folder without listing it anywhere.
    /// (Steps 81, 94, 108, 116, 117, 120, 132, 137, 141, 148, 150, 157, 162, 171, 225 of seed 71372's generated
    /// plan.)
    static let folderRevivedWhereTheRemoteLastHadIt = Regression(
        "folderRevivedWhereTheRemoteLastHadIt",
        Plan(seed: 71372, devices: 4, feedPage: 6,
             rates: FaultRates(dropRequest: 0.06, dropResponse: 0.04, duplicate: 0.04, staleFeed: 0.07,
                               slowTransfer: 0.06, corrupt: 0.04),
             steps: [
                Step(.pull, on: 3, seed: 0x757c3da90de814a3, after: 3885000000),
                Step(.mkdir, on: 3, seed: 0x480573fcdf3409f0, after: 353000000),
                Step(.pull, on: 0, seed: 0x938dfacfc45daa3, after: 0),
                Step(.push, on: 3, seed: 0xa34159e4e37cae97, after: 2881000000),
                Step(.mkdir, on: 0, seed: 0x374c3e2cfac0dc02, after: 920000000),
                Step(.pull, on: 2, seed: 0xc6bb3e8253eb4df0, after: 4722000000),
                Step(.pull, on: 1, seed: 0xde55a7cef1baa319, after: 1451000000),
                Step(.rename, on: 2, seed: 0x8b69bd5b87131a31, after: 1468000000),
                Step(.push, on: 2, seed: 0xa3e3279756f8c580, after: 3951000000),
                Step(.rmdir, on: 2, seed: 0xf87c5aad766f3d33, after: 0),
                Step(.push, on: 0, seed: 0xc3ad0975f2237f92, after: 841000000),
                Step(.create, on: 1, seed: 0xbc4e0b005f0e8852, after: 3162000000),
                Step(.push, on: 2, seed: 0x478de63ca1ac630a, after: 0),
                Step(.pull, on: 1, seed: 0x9193a29330cf57b6, after: 421000000),
                Step(.rename, on: 0, seed: 0xee41374dca7ffc75, after: 3858000000),
             ]))

    /// a's create landed unanswered and a wrote the file again; a batch carried that write and the remote
    /// refused it (the create is there); before the batch's loop came to that refusal, another item's push
    /// pushed the file first and it landed; the loop then settled the stale refusal as the create's answer
    /// and put the first content's hash back as the remote's: a diverged from the remote for ever.
    /// (Steps 10, 11, 12, 13, 17, 20, 24, 27, 35, 42, 43, 45, 51, 57, 61, 63, 68, 78, 91, 99, 114, 125, 141,
    /// 142, 148, 151, 152, 156, 172, 180, 191, 209, 228, 279 of seed 9101681's generated plan.)
    static let staleBatchRefusalAfterTheItemWasPushed = Regression(
        "staleBatchRefusalAfterTheItemWasPushed",
        Plan(seed: 9101681, devices: 3, feedPage: 5,
             rates: FaultRates(dropRequest: 0.1, dropResponse: 0.0, duplicate: 0.05, staleFeed: 0.05,
                               slowTransfer: 0.03, corrupt: 0.02),
             steps: [
                Step(.pull, on: 2, seed: 0x1ea2083a785838d7, after: 633000000),
                Step(.pull, on: 1, seed: 0xbec08a2ef23c274a, after: 798000000),
                Step(.mkdir, on: 1, seed: 0x6dfa1a81ecffa064, after: 4570000000),
                Step(.create, on: 2, seed: 0x7eee971ba19d53c7, after: 738000000),
                Step(.push, on: 1, seed: 0xc0dd88a80604d0c, after: 2128000000),
                Step(.create, on: 2, seed: 0x6927329a7d7597ee, after: 4273000000),
                Step(.delete, on: 2, seed: 0x6c046a766630e4d6, after: 76000000),
                Step(.create, on: 2, seed: 0xf8f13a84cfc8755b, after: 3635000000),
                Step(.beginWrite, on: 2, seed: 0xb7569286c01ffe1b, after: 2135000000),
                Step(.mkdir, on: 2, seed: 0x516542f6188b9529, after: 3272000000),
                Step(.create, on: 2, seed: 0xfcf0dc8100503821, after: 2928000000),
                Step(.beginWrite, on: 2, seed: 0x5d5731789b9aa0ae, after: 4389000000),
                Step(.push, on: 2, seed: 0xb944fad12d004ca4, after: 2341000000),
                Step(.push, on: 2, seed: 0x349ee609ea305f99, after: 2474000000),
                Step(.create, on: 2, seed: 0xe52c9cb64db4f4b, after: 788000000),
                Step(.mkdir, on: 2, seed: 0x7e61d331d2b04ad7, after: 3424000000),
                Step(.pull, on: 0, seed: 0x8e0e691a00e99a44, after: 317000000),
                Step(.move, on: 0, seed: 0xe4a2f78d222db052, after: 821000000),
                Step(.push, on: 2, seed: 0xee97463f780942b6, after: 2216000000),
                Step(.create, on: 0, seed: 0x7b27eb9efd4f6376, after: 1825000000),
                Step(.rename, on: 0, seed: 0xf915ed66d85e16b, after: 4347000000),
                Step(.mkdir, on: 0, seed: 0xa82d8cf8ee2afb5d, after: 1055000000),
                Step(.push, on: 0, seed: 0xdda918bde00e1a8d, after: 4173000000),
                Step(.pull, on: 0, seed: 0x79743d7f05946bb2, after: 2224000000),
                Step(.create, on: 0, seed: 0x1233b4cb4040835c, after: 4154000000),
                Step(.push, on: 0, seed: 0x4fb7216fff0ff1f0, after: 4690000000),
                Step(.create, on: 0, seed: 0x1a25bd13b8f270e0, after: 3774000000),
                Step(.create, on: 0, seed: 0xa131de996376ce0e, after: 853000000),
                Step(.create, on: 0, seed: 0x34cecbc44a0d51ff, after: 1868000000),
                Step(.push, on: 0, seed: 0x77b78ed3848a5460, after: 0),
                Step(.move, on: 0, seed: 0x1514bf60330b95a9, after: 4848000000),
                Step(.mkdir, on: 0, seed: 0x164a7f53097b9ce, after: 4016000000),
                Step(.rename, on: 0, seed: 0x7e1d1ee552107eeb, after: 3789000000),
                Step(.write, on: 0, seed: 0x42ab88fd94f6f4c0, after: 0),
             ]))

    /// b renamed a file that a wrote; the rename landed and its answer was lost; b deleted the file. The
    /// delete met b's own rename as a newer version, whose author is still a (the content's writer), took it
    /// for an edit made elsewhere and brought the file back (edit wins over delete).
    /// (Steps 13, 52, 67, 68, 83, 144, 145, 166, 167, 185, 186, 204, 207, 221, 228, 249, 262, 270, 273, 281,
    /// 287, 294, 297, 302, 312, 317, 319, 322, 331, 334, 337, 339, 345, 346, 357 of seed 9102935's plan.)
    static let deleteAfterOwnLandedRename = Regression(
        "deleteAfterOwnLandedRename",
        Plan(seed: 9102935, devices: 4, feedPage: 5,
             rates: FaultRates(dropRequest: 0.07, dropResponse: 0.04, duplicate: 0.06, staleFeed: 0.07,
                               slowTransfer: 0.09, corrupt: 0.0),
             steps: [
                Step(.pull, on: 0, seed: 0x7e368c39223cc0a, after: 3075000000),
                Step(.mkdir, on: 0, seed: 0xc3227de0d5ca83e6, after: 3975000000),
                Step(.pull, on: 3, seed: 0xe2cd906429ce097e, after: 4252000000),
                Step(.mkdir, on: 0, seed: 0xe9898f3e332265e5, after: 2442000000),
                Step(.rename, on: 0, seed: 0x38168305ecf28a2f, after: 1183000000),
                Step(.create, on: 3, seed: 0xdf528dba144eb126, after: 283000000),
                Step(.create, on: 0, seed: 0xb439ed66d9b361e1, after: 3058000000),
                Step(.push, on: 3, seed: 0x6d0fbb3793ccfd07, after: 2826000000),
                Step(.pull, on: 0, seed: 0xcfed5e734eccf448, after: 3606000000),
                Step(.rename, on: 0, seed: 0x40a2e6fcf4248827, after: 4393000000),
                Step(.push, on: 0, seed: 0xc74212d0b735972b, after: 4163000000),
                Step(.create, on: 0, seed: 0x2c0d587a0b82c758, after: 3976000000),
                Step(.create, on: 0, seed: 0xd13aa62fc16fb30a, after: 2109000000),
                Step(.push, on: 0, seed: 0x59d3fb2ca3b2c34b, after: 2639000000),
                Step(.pull, on: 1, seed: 0x69cdbecea8691ffc, after: 1977000000),
                Step(.delete, on: 1, seed: 0x325077e92728897e, after: 4767000000),
                Step(.mkdir, on: 0, seed: 0x87ef57408ccab950, after: 1169000000),
                Step(.create, on: 1, seed: 0xb08d9f2790bc485f, after: 4160000000),
                Step(.push, on: 0, seed: 0x83bacf4210b9547, after: 1381000000),
                Step(.delete, on: 1, seed: 0x901ad999aa7d1910, after: 35000000),
                Step(.push, on: 1, seed: 0x1afd96afa08448f5, after: 127000000),
                Step(.move, on: 1, seed: 0x6ac62c95c93ba2d, after: 4369000000),
                Step(.create, on: 1, seed: 0x6f6f68b5bfb9c57d, after: 1004000000),
                Step(.beginWrite, on: 1, seed: 0x59e72c1fc4ad3838, after: 4800000000),
                Step(.pull, on: 1, seed: 0xda823cf08e615b35, after: 1675000000),
                Step(.create, on: 0, seed: 0xda9790bc38899d6c, after: 4349000000),
                Step(.push, on: 1, seed: 0xb3e05c372f60775b, after: 2335000000),
                Step(.truncate, on: 0, seed: 0xc588bb8542b6e862, after: 4961000000),
                Step(.rename, on: 1, seed: 0xf3bbf0edfd5853ac, after: 0),
                Step(.pull, on: 1, seed: 0x5506670099226492, after: 1245000000),
                Step(.delete, on: 1, seed: 0xaf7005bb1fe03dae, after: 1493000000),
                Step(.push, on: 0, seed: 0x1db51a89675f63e5, after: 3145000000),
                Step(.rename, on: 1, seed: 0x99afa12bf3c02798, after: 3384000000),
                Step(.push, on: 1, seed: 0x5a48b05b830e1e67, after: 3271000000),
                Step(.delete, on: 1, seed: 0x19ac1d246e412792, after: 1293000000),
             ]))

    /// b's create landed unanswered; c wrote the file; b's puller moved b's copy out of the way of a's file
    /// that took its name; a deleted the file by renaming over it. b's retry of the create met the tombstone
    /// and counted the new name its puller gave it as a change of metadata of its own: edit wins over delete,
    /// and the file came back with b's first content.
    /// (Steps 3, 4, 5, 9, 21, 23, 25, 27, 30, 38, 45, 47, 49, 68, 102, 104, 113, 114, 158, 159, 202, 221, 229 of
    /// seed 31005220's generated plan.)
    static let deleteMeetsALandedCreateMovedOutOfTheWay = Regression(
        "deleteMeetsALandedCreateMovedOutOfTheWay",
        Plan(seed: 31005220, devices: 3, feedPage: 2,
             rates: FaultRates(dropRequest: 0.04, dropResponse: 0.1, duplicate: 0.08, staleFeed: 0.05,
                               slowTransfer: 0.19, corrupt: 0.03),
             steps: [
                Step(.pull, on: 1, seed: 0xcf413496c564818c, after: 3625000000),
                Step(.pull, on: 0, seed: 0x74c756ae198c8ce, after: 2342000000),
                Step(.pull, on: 2, seed: 0xf8ca59f9dc4aa7d1, after: 0),
                Step(.create, on: 1, seed: 0x92e87d57197d0f82, after: 2442000000),
                Step(.create, on: 0, seed: 0xfdf5edfa8c887829, after: 2095000000),
                Step(.mkdir, on: 1, seed: 0x61573a7d8b457108, after: 928000000),
                Step(.create, on: 1, seed: 0x64328f3f69f49945, after: 0),
                Step(.push, on: 1, seed: 0x14d63ea05ddc50a1, after: 3825000000),
                Step(.create, on: 2, seed: 0x4be7575a789156b0, after: 1202000000),
                Step(.chmod, on: 1, seed: 0xb199541a6446d6d7, after: 3889000000),
                Step(.push, on: 2, seed: 0x70fc696968391167, after: 2302000000),
                Step(.push, on: 0, seed: 0x2b58aba05380cf1b, after: 4108000000),
                Step(.write, on: 1, seed: 0xef11966b3b06ec1e, after: 3353000000),
                Step(.push, on: 1, seed: 0x39d070516bec11c4, after: 3935000000),
                Step(.pull, on: 2, seed: 0x6636df90226caacb, after: 2587000000),
                Step(.rename, on: 2, seed: 0x2871b6b112a20db5, after: 2530000000),
                Step(.write, on: 2, seed: 0xd5ec1f6bb944e10c, after: 2431000000),
                Step(.create, on: 2, seed: 0xe0e1b2cbd2d76841, after: 0),
                Step(.rename, on: 0, seed: 0xbb431f5d58ce44a0, after: 761000000),
                Step(.push, on: 2, seed: 0xf7607247a2585e58, after: 3868000000),
                Step(.pull, on: 0, seed: 0x13358d21a53e95ba, after: 1132000000),
                Step(.create, on: 0, seed: 0x73d2f4b1575adc26, after: 1851000000),
                Step(.rename, on: 0, seed: 0x46bb56a1168b9544, after: 4598000000),
             ]))

    /// b crashed while writing its new file, whose content file kept more bytes than the store recorded; b's
    /// create of those bytes landed unanswered; d deleted the file and b moved it. b's retry met the tombstone
    /// and acknowledged the landed create without its size: b kept the size before the crash, the remote the
    /// size of the bytes sent.
    /// (Steps 4, 32, 71, 72, 85, 87, 101, 113, 118, 120, 121, 122, 128, 129, 161, 164, 167, 191, 194, 198, 201,
    /// 224, 245, 246, 250, 266, 272, 282, 283 of seed 31005011's generated plan.)
    static let landedCreateAcknowledgedWithItsSize = Regression(
        "landedCreateAcknowledgedWithItsSize",
        Plan(seed: 31005011, devices: 4, feedPage: 5,
             rates: FaultRates(dropRequest: 0.04, dropResponse: 0.1, duplicate: 0.04, staleFeed: 0.06,
                               slowTransfer: 0.04, corrupt: 0.0),
             steps: [
                Step(.pull, on: 3, seed: 0x6c2cb30214858f0c, after: 860000000),
                Step(.mkdir, on: 3, seed: 0x980673a0e22e750a, after: 1617000000),
                Step(.pull, on: 1, seed: 0xd9ab5deeb9c595d4, after: 1305000000),
                Step(.create, on: 1, seed: 0xc066e444fa21163e, after: 3936000000),
                Step(.mkdir, on: 3, seed: 0xdee056de889d9d86, after: 866000000),
                Step(.push, on: 3, seed: 0xd613fad81983c216, after: 3068000000),
                Step(.pull, on: 1, seed: 0x71d1335ec3f12b11, after: 4771000000),
                Step(.push, on: 1, seed: 0xc446a5da60a0027c, after: 410000000),
                Step(.create, on: 3, seed: 0xdef9d7bba94b1449, after: 4637000000),
                Step(.pull, on: 3, seed: 0x3fb066c2d72630d6, after: 4166000000),
                Step(.rmdir, on: 3, seed: 0xedbca2b4b286e061, after: 216000000),
                Step(.create, on: 1, seed: 0xca7266f4d18134df, after: 4469000000),
                Step(.rename, on: 3, seed: 0x4a0c763488c96ca4, after: 4812000000),
                Step(.create, on: 1, seed: 0x900d8751bd7e9d5e, after: 2950000000),
                Step(.beginWrite, on: 3, seed: 0x311d143e87f40fa2, after: 1228000000),
                Step(.mkdir, on: 1, seed: 0x38e871cc98fc8d97, after: 1694000000),
                Step(.push, on: 3, seed: 0xcd7e0072815b0ad2, after: 4091000000),
                Step(.rmdir, on: 1, seed: 0x4b71efaeeb4c6524, after: 806000000),
                Step(.create, on: 3, seed: 0x325e53449f7f74c2, after: 1472000000),
                Step(.create, on: 1, seed: 0x6c771fb715a8daf9, after: 363000000),
                Step(.move, on: 3, seed: 0x21904814614953c8, after: 4283000000),
                Step(.beginWrite, on: 1, seed: 0x898681890a0e025e, after: 654000000),
                Step(.crash, on: 1, seed: 0x3e32a1f197660009, after: 718000000),
                Step(.pull, on: 1, seed: 0x7c8c3010a04769ed, after: 3113000000),
                Step(.push, on: 1, seed: 0xd9e22e520fc552f6, after: 3155000000),
                Step(.pull, on: 3, seed: 0xec625c8d45354863, after: 4662000000),
                Step(.delete, on: 3, seed: 0x7bcd6543765e2076, after: 3484000000),
                Step(.push, on: 3, seed: 0xd012f2a03339fb68, after: 2088000000),
                Step(.move, on: 1, seed: 0x4a89626c3974d716, after: 3342000000),
             ]))

    /// c's batch began with a folder whose new name another folder held on the remote, one that c deleted and
    /// whose delete the remote refused (not empty there): that entry failed at every pass, and the batch
    /// stopped at it, so none of the seven refusals after it were ever settled and nothing of c went up again.
    /// An item that cannot go up now no longer holds back the others. (139 steps of seed 31018112's plan.)
    static let oneStuckItemDoesNotHoldBackTheBatch = Regression(
        "oneStuckItemDoesNotHoldBackTheBatch",
        Plan(seed: 31018112, devices: 4, feedPage: 3,
             rates: FaultRates(dropRequest: 0.06, dropResponse: 0.04, duplicate: 0.02, staleFeed: 0.02,
                               slowTransfer: 0.16, corrupt: 0.05),
             steps: [
                Step(.push, on: 3, seed: 0xc6a9440c0f29f4ee, after: 0),
                Step(.pull, on: 1, seed: 0xd1e1c52045fd4ce, after: 3725000000),
                Step(.push, on: 0, seed: 0x5774281bc94be4bb, after: 2763000000),
                Step(.create, on: 1, seed: 0x3c4335640b3c1f53, after: 3421000000),
                Step(.pull, on: 3, seed: 0xb77697fef3190db7, after: 1626000000),
                Step(.mkdir, on: 1, seed: 0x7344700d70394330, after: 3869000000),
                Step(.create, on: 1, seed: 0xf5eebbe1cd1cf1bd, after: 3885000000),
                Step(.pin, on: 3, seed: 0x4e0032f9a113a3f1, after: 2655000000),
                Step(.rename, on: 1, seed: 0x98a5a55786a92a70, after: 3459000000),
                Step(.heal, on: 1, seed: 0x708c8a5861541b67, after: 150000000),
                Step(.pull, on: 2, seed: 0x1719c7ee0648f8b5, after: 1079000000),
                Step(.download, on: 1, seed: 0x5e05746a24615d4d, after: 0),
                Step(.create, on: 2, seed: 0x1895c698172ada1c, after: 218000000),
                Step(.pull, on: 2, seed: 0xff7134d860582dbd, after: 4683000000),
                Step(.create, on: 1, seed: 0x885a76122788efe2, after: 2892000000),
                Step(.push, on: 1, seed: 0xe7b0b91b7caf5b8f, after: 3722000000),
                Step(.push, on: 1, seed: 0x8f8728ce2e3a58e, after: 3961000000),
                Step(.write, on: 1, seed: 0x8e2a724cee15b3f7, after: 0),
                Step(.write, on: 3, seed: 0x79eefa27f3669b61, after: 2165000000),
                Step(.create, on: 2, seed: 0xf34591cd3d39d0da, after: 3853000000),
                Step(.write, on: 0, seed: 0xf5b909a1fc99f65b, after: 3802000000),
                Step(.pull, on: 2, seed: 0x7a365d1267b67901, after: 1440000000),
                Step(.push, on: 2, seed: 0x5c5cbc496868994b, after: 2823000000),
                Step(.pull, on: 3, seed: 0x260f047b0c1886e5, after: 2272000000),
                Step(.rename, on: 3, seed: 0xc5aa9581ffcc2410, after: 3197000000),
                Step(.push, on: 2, seed: 0xdce1de64b9f5a346, after: 441000000),
                Step(.append, on: 2, seed: 0x8d5afcf7606082b6, after: 3473000000),
                Step(.mkdir, on: 1, seed: 0xe82bc2babc58f7be, after: 2109000000),
                Step(.push, on: 0, seed: 0xcf841998755dff91, after: 3809000000),
                Step(.pull, on: 0, seed: 0x9a8a5f37891bc32, after: 4182000000),
                Step(.discard, on: 3, seed: 0x578d5d05d777a479, after: 4209000000),
                Step(.write, on: 0, seed: 0xb3e3a3959d27c4c2, after: 3513000000),
                Step(.endWrite, on: 3, seed: 0x38885b76d1e8ed89, after: 917000000),
                Step(.create, on: 1, seed: 0x4cf4a2b171a5526f, after: 129000000),
                Step(.write, on: 2, seed: 0xc2d7113f56bc712a, after: 2253000000),
                Step(.create, on: 0, seed: 0x6bcc21e2cd17956b, after: 2568000000),
                Step(.rename, on: 0, seed: 0x4f5ddbebc69bc419, after: 2914000000),
                Step(.push, on: 2, seed: 0xd4c63b531c18bdca, after: 2823000000),
                Step(.endWrite, on: 1, seed: 0x933dc708ad7585c5, after: 80000000),
                Step(.truncate, on: 2, seed: 0x18f3df7557c6f313, after: 3652000000),
                Step(.append, on: 0, seed: 0xf6ee70f61243b666, after: 2302000000),
                Step(.create, on: 0, seed: 0x3196e08c085b82aa, after: 4547000000),
                Step(.push, on: 2, seed: 0x685d6a26f5cf4139, after: 3021000000),
                Step(.endWrite, on: 1, seed: 0x6fb9a2774ee29135, after: 2762000000),
                Step(.push, on: 1, seed: 0x21f72fb6619be799, after: 1661000000),
                Step(.pull, on: 1, seed: 0xd059c7a873d7b1fe, after: 0),
                Step(.mkdir, on: 1, seed: 0xca7d062a4cf1b923, after: 4299000000),
                Step(.rmdir, on: 2, seed: 0xe55aa5662d546590, after: 2475000000),
                Step(.write, on: 1, seed: 0xd385810670ad8f64, after: 127000000),
                Step(.append, on: 2, seed: 0xd01f5a31a0f42eea, after: 4482000000),
                Step(.pull, on: 0, seed: 0x15899e85a294b9e1, after: 175000000),
                Step(.push, on: 2, seed: 0x7b6ca9e3f034cca0, after: 0),
                Step(.write, on: 2, seed: 0x785d719ce1d9b6af, after: 3671000000),
                Step(.endWrite, on: 2, seed: 0x9eef5eda52b79dd5, after: 3116000000),
                Step(.truncate, on: 1, seed: 0x619e9aee0d432097, after: 307000000),
                Step(.push, on: 2, seed: 0x2c1926b724202542, after: 2947000000),
                Step(.rename, on: 0, seed: 0x989888de2a4b6472, after: 3621000000),
                Step(.create, on: 3, seed: 0x82366193d973230c, after: 4376000000),
                Step(.push, on: 1, seed: 0xe5d2d5284121e837, after: 3070000000),
                Step(.beginWrite, on: 0, seed: 0x9a0ba0b19df12195, after: 4136000000),
                Step(.push, on: 1, seed: 0x8729a53b5438dc1a, after: 4715000000),
                Step(.create, on: 2, seed: 0x2964745e2af17ce9, after: 1671000000),
                Step(.push, on: 0, seed: 0x9194dc559fd7c0ed, after: 4329000000),
                Step(.pull, on: 0, seed: 0xee039ce2053a3f74, after: 3873000000),
                Step(.pull, on: 2, seed: 0xdaeaac61da5ce5c2, after: 2550000000),
                Step(.create, on: 1, seed: 0x2b3490a4c70b6f77, after: 3564000000),
                Step(.delete, on: 1, seed: 0x49b3d07741640937, after: 4869000000),
                Step(.move, on: 0, seed: 0x9d601559952a9807, after: 3408000000),
                Step(.crash, on: 3, seed: 0x14e46c73ea863300, after: 0),
                Step(.discard, on: 1, seed: 0x620c7788f1c3fb5b, after: 2624000000),
                Step(.push, on: 3, seed: 0x90ba1ba01403fead, after: 1388000000),
                Step(.download, on: 1, seed: 0x51fd65e3a9f79c8f, after: 3030000000),
                Step(.move, on: 2, seed: 0x2a4f061fa1035ad1, after: 3787000000),
                Step(.push, on: 1, seed: 0xe8c936d87c44bd91, after: 0),
                Step(.truncate, on: 3, seed: 0xc6b750c0394eee9a, after: 3856000000),
                Step(.push, on: 2, seed: 0x4d097084612c2e00, after: 3102000000),
                Step(.beginWrite, on: 2, seed: 0xf8dc6a0541c84988, after: 4427000000),
                Step(.pin, on: 1, seed: 0x85911e3b79f0304, after: 3548000000),
                Step(.promote, on: 3, seed: 0x9eaf437e602ebf8a, after: 58000000),
                Step(.push, on: 3, seed: 0xc6876169044857a0, after: 3413000000),
                Step(.delete, on: 3, seed: 0x73fea952d91a7c5f, after: 0),
                Step(.pull, on: 1, seed: 0x5dc2582fb3493ca5, after: 4506000000),
                Step(.mkdir, on: 3, seed: 0x2441d489441fcf20, after: 1691000000),
                Step(.push, on: 2, seed: 0xdcc1fb41b9245ecd, after: 4565000000),
                Step(.download, on: 1, seed: 0x66d945c7ed060a82, after: 1841000000),
                Step(.push, on: 3, seed: 0x460d3d5fa011b068, after: 3931000000),
                Step(.discard, on: 3, seed: 0xe2925a06730afda5, after: 3879000000),
                Step(.delete, on: 1, seed: 0xfc525fd644e526, after: 0),
                Step(.delete, on: 3, seed: 0x9d736c1dfb3cf475, after: 4818000000),
                Step(.push, on: 1, seed: 0xc9a1500621d38121, after: 1493000000),
                Step(.pull, on: 3, seed: 0xd8fff0e993f3178, after: 0),
                Step(.pull, on: 1, seed: 0xfa9ec2204184cbf5, after: 4645000000),
                Step(.partition, on: 3, seed: 0x9137006a02cd2b04, after: 3632000000),
                Step(.rename, on: 2, seed: 0x914f48be3a78ef2, after: 3585000000),
                Step(.partition, on: 2, seed: 0xb46826ec660b4ad4, after: 3763000000),
                Step(.partition, on: 1, seed: 0x1a70b6b8cddcfc4b, after: 3178000000),
                Step(.push, on: 0, seed: 0x24292fab7f17dd15, after: 4555000000),
                Step(.write, on: 1, seed: 0x661d41dcd2b1dc2c, after: 1466000000),
                Step(.push, on: 0, seed: 0x912b18daa4503c37, after: 300000000),
                Step(.beginWrite, on: 1, seed: 0x15344c3764f8caa5, after: 2481000000),
                Step(.push, on: 3, seed: 0x9f67ba3d27337968, after: 2641000000),
                Step(.mkdir, on: 2, seed: 0xbd3310a2058a4763, after: 1013000000),
                Step(.heal, on: 2, seed: 0x5041aa7a0dc5a3e6, after: 3570000000),
                Step(.evict, on: 1, seed: 0x167bbf41e09c0eb1, after: 765000000),
                Step(.pull, on: 2, seed: 0xebc7aebd8a4b0476, after: 4820000000),
                Step(.delete, on: 3, seed: 0x2131250caf0c3565, after: 1065000000),
                Step(.push, on: 1, seed: 0x99df53452997d9f1, after: 0),
                Step(.download, on: 2, seed: 0xf45997f940e4d78a, after: 108000000),
                Step(.push, on: 0, seed: 0xfb90d0d5dbad65f7, after: 3224000000),
                Step(.append, on: 0, seed: 0x42ccd08d420cf2bb, after: 1783000000),
                Step(.pull, on: 0, seed: 0xa58a09391db17020, after: 0),
                Step(.evict, on: 1, seed: 0xe76429ec537f9f3a, after: 2441000000),
                Step(.delete, on: 0, seed: 0x6223cac53f9db45a, after: 1525000000),
                Step(.push, on: 2, seed: 0x184a27c970a20bb5, after: 4178000000),
                Step(.push, on: 1, seed: 0x1924b7cc16060350, after: 2431000000),
                Step(.push, on: 0, seed: 0x831aeacde9aef083, after: 0),
                Step(.move, on: 1, seed: 0x13a40ec7aac41053, after: 815000000),
                Step(.rmdir, on: 0, seed: 0x9d0961a7e0c47b18, after: 4764000000),
                Step(.write, on: 2, seed: 0xd8f8589525c0bebe, after: 3955000000),
                Step(.rename, on: 2, seed: 0xa51b2ac5de013651, after: 1911000000),
                Step(.crash, on: 3, seed: 0xe240753f1cd9d986, after: 937000000),
                Step(.rename, on: 0, seed: 0xa932e8c763569edf, after: 603000000),
                Step(.delete, on: 2, seed: 0x2cc484e14cb49934, after: 2843000000),
                Step(.push, on: 1, seed: 0x26cefc12955c00ca, after: 2418000000),
                Step(.write, on: 2, seed: 0xaabbf32a7dd718f4, after: 4987000000),
                Step(.partition, on: 1, seed: 0xf6cee6ffd80516df, after: 4308000000),
                Step(.delete, on: 1, seed: 0x878f20554267795d, after: 442000000),
                Step(.delete, on: 2, seed: 0x8af5fca72bcbdb5b, after: 4337000000),
                Step(.write, on: 0, seed: 0x1710b38786c24126, after: 408000000),
                Step(.rename, on: 2, seed: 0xf60eedf4bf11e575, after: 3248000000),
                Step(.append, on: 1, seed: 0xc0d51f9fd1995d68, after: 1797000000),
                Step(.download, on: 3, seed: 0xc381f151a06686a3, after: 4234000000),
                Step(.push, on: 3, seed: 0xf18be4922730d7ce, after: 2562000000),
                Step(.truncate, on: 1, seed: 0xbaf83ff618564069, after: 0),
                Step(.write, on: 3, seed: 0x936d23a36068ae7e, after: 4969000000),
                Step(.delete, on: 2, seed: 0x4a9185b576f5bd06, after: 2927000000),
                Step(.push, on: 3, seed: 0xef8824db7e7c0fec, after: 1315000000),
                Step(.push, on: 0, seed: 0x2c3f6c480d1de8e1, after: 978000000),
                Step(.crash, on: 2, seed: 0xbe0ba71756dc822b, after: 1372000000),
             ]))

    /// The same stall as `oneStuckItemDoesNotHoldBackTheBatch`, found by another seed (156 steps of seed
    /// 31004976's plan).
    static let oneStuckItemDoesNotHoldBackTheBatch2 = Regression(
        "oneStuckItemDoesNotHoldBackTheBatch2",
        Plan(seed: 31004976, devices: 4, feedPage: 6,
             rates: FaultRates(dropRequest: 0.01, dropResponse: 0.02, duplicate: 0.06, staleFeed: 0.01,
                               slowTransfer: 0.04, corrupt: 0.04),
             steps: [
                Step(.pull, on: 3, seed: 0x8d68a400405a5140, after: 2207000000),
                Step(.partition, on: 2, seed: 0x5db0f633e4486baa, after: 4719000000),
                Step(.pull, on: 1, seed: 0xcff47853832b3583, after: 4724000000),
                Step(.evict, on: 3, seed: 0xbbab2b943c1d2354, after: 246000000),
                Step(.create, on: 1, seed: 0x81f5a5f661f3f8bc, after: 0),
                Step(.append, on: 3, seed: 0x11dba3e0e8cae6ff, after: 2060000000),
                Step(.mkdir, on: 3, seed: 0xd015524cdd6a83f6, after: 3254000000),
                Step(.heal, on: 1, seed: 0xb905913ea51a5e34, after: 2149000000),
                Step(.pull, on: 0, seed: 0x2935c45c4241c06, after: 2094000000),
                Step(.create, on: 2, seed: 0x8531ac906c5718ab, after: 2202000000),
                Step(.create, on: 0, seed: 0x68cacac06ac77887, after: 3614000000),
                Step(.endWrite, on: 0, seed: 0x31386b5d3f84cd9d, after: 1837000000),
                Step(.push, on: 1, seed: 0x6e4a6d6f837bf4db, after: 4134000000),
                Step(.push, on: 1, seed: 0xe8a9c0dcb2403009, after: 132000000),
                Step(.push, on: 3, seed: 0xbe3aa687f6ed1876, after: 4814000000),
                Step(.push, on: 0, seed: 0x4817fb331debdce9, after: 111000000),
                Step(.pull, on: 2, seed: 0xb0905d4e83a2baec, after: 2372000000),
                Step(.pull, on: 3, seed: 0x277d0e9a6ddf4db7, after: 3543000000),
                Step(.delete, on: 3, seed: 0x5943f303d17c3be2, after: 1157000000),
                Step(.beginWrite, on: 2, seed: 0xdc8dcb16aca4d140, after: 841000000),
                Step(.pull, on: 0, seed: 0x6adc75833443c08c, after: 4261000000),
                Step(.discard, on: 3, seed: 0xa90302437e2dac59, after: 1473000000),
                Step(.promote, on: 2, seed: 0x9a5f2c73137a4470, after: 1836000000),
                Step(.move, on: 0, seed: 0xcc6021acf2d57df1, after: 1830000000),
                Step(.truncate, on: 3, seed: 0xe8a0667035b8d35d, after: 4295000000),
                Step(.crash, on: 1, seed: 0xeaad15559f772271, after: 1073000000),
                Step(.append, on: 0, seed: 0x382bd3b786e5fcd3, after: 3131000000),
                Step(.mkdir, on: 0, seed: 0x33653a4dd7ac9e11, after: 0),
                Step(.delete, on: 0, seed: 0x84e50738e337b54b, after: 690000000),
                Step(.rmdir, on: 0, seed: 0x66fd482a35bec8cc, after: 1117000000),
                Step(.move, on: 3, seed: 0x148d11482146acf6, after: 2278000000),
                Step(.pull, on: 0, seed: 0xd854d1f398aaf25d, after: 1103000000),
                Step(.push, on: 3, seed: 0x3c3fa20e379e063b, after: 3917000000),
                Step(.heal, on: 2, seed: 0x4ea1761fa66c851d, after: 4048000000),
                Step(.append, on: 1, seed: 0x4b7c4094f5c31098, after: 2341000000),
                Step(.push, on: 0, seed: 0xdfad79367d0b7074, after: 4119000000),
                Step(.rename, on: 3, seed: 0xf456f0bc538d3dd1, after: 4725000000),
                Step(.write, on: 3, seed: 0x1581bb5783c288f0, after: 200000000),
                Step(.endWrite, on: 1, seed: 0x357ce8295dee67c9, after: 3742000000),
                Step(.pull, on: 1, seed: 0x308f042264c78a98, after: 3849000000),
                Step(.push, on: 3, seed: 0xa521479228bbb801, after: 2588000000),
                Step(.keepCurrent, on: 0, seed: 0x4934341091ce7905, after: 1676000000),
                Step(.pull, on: 3, seed: 0xb2d2bbd97c778405, after: 4725000000),
                Step(.pull, on: 2, seed: 0x90d90d555e992dd7, after: 2015000000),
                Step(.push, on: 2, seed: 0x1f5f20f3700a50aa, after: 655000000),
                Step(.create, on: 0, seed: 0x95e25b374ec89ffe, after: 3489000000),
                Step(.push, on: 1, seed: 0xe1cf81946a8ded8c, after: 355000000),
                Step(.beginWrite, on: 1, seed: 0xf363601e61691394, after: 4763000000),
                Step(.truncate, on: 2, seed: 0x9e314a9e9b13c694, after: 1043000000),
                Step(.delete, on: 0, seed: 0x84918aadf334b483, after: 1737000000),
                Step(.append, on: 1, seed: 0x1f6cc1610d341c95, after: 3528000000),
                Step(.pull, on: 0, seed: 0x9f95b86f17b56bc6, after: 4107000000),
                Step(.push, on: 2, seed: 0x76f4ec9254d3236b, after: 4427000000),
                Step(.download, on: 0, seed: 0x6bca88cfc71ae43, after: 4897000000),
                Step(.delete, on: 3, seed: 0xfb07c50fad0b6397, after: 290000000),
                Step(.create, on: 0, seed: 0xbecb0dc266ff6a0a, after: 4341000000),
                Step(.create, on: 3, seed: 0x343dbc2dfc0fe733, after: 705000000),
                Step(.create, on: 0, seed: 0xa347800b9d7c3efe, after: 0),
                Step(.beginWrite, on: 3, seed: 0xb0a131dac680e855, after: 0),
                Step(.promote, on: 0, seed: 0xa16f9973f50f9263, after: 1986000000),
                Step(.mkdir, on: 2, seed: 0x8022483b900d5130, after: 3365000000),
                Step(.pull, on: 1, seed: 0x5c031d6d9c27c565, after: 0),
                Step(.pull, on: 3, seed: 0xd4c65031b207f2f2, after: 0),
                Step(.push, on: 3, seed: 0xd3b0bd524cbe0e36, after: 3134000000),
                Step(.promote, on: 0, seed: 0x493f6a3370a055d3, after: 2821000000),
                Step(.pull, on: 2, seed: 0x39c3e2a7292cef17, after: 4187000000),
                Step(.endWrite, on: 2, seed: 0x89343c4f7421e90a, after: 1911000000),
                Step(.create, on: 3, seed: 0xdd38cb353365579f, after: 608000000),
                Step(.discard, on: 0, seed: 0x7b8f4c20b94dc631, after: 3906000000),
                Step(.beginWrite, on: 2, seed: 0x930502299b95340, after: 4277000000),
                Step(.discard, on: 1, seed: 0x892e407d43ef2adf, after: 0),
                Step(.beginWrite, on: 2, seed: 0xb65227e3a9ee41d, after: 0),
                Step(.create, on: 2, seed: 0x9a230b6f0f32339b, after: 226000000),
                Step(.write, on: 3, seed: 0x6b3182d56661c682, after: 1768000000),
                Step(.crash, on: 1, seed: 0x45ca9f0423691a54, after: 4097000000),
                Step(.move, on: 0, seed: 0x863ff2e6befe2bf3, after: 3549000000),
                Step(.push, on: 0, seed: 0xd5f740dd61ba6322, after: 4131000000),
                Step(.push, on: 0, seed: 0x2a4ca4da96ab3099, after: 4247000000),
                Step(.delete, on: 0, seed: 0x8405fdd58c1d49c9, after: 4637000000),
                Step(.mkdir, on: 0, seed: 0xdb2d3e1e877e94e1, after: 3493000000),
                Step(.rename, on: 1, seed: 0xb718b052eb69ced9, after: 3936000000),
                Step(.mkdir, on: 0, seed: 0xff9cf28d8c142fff, after: 2774000000),
                Step(.pull, on: 2, seed: 0xe43b9f656f2f045a, after: 2930000000),
                Step(.append, on: 2, seed: 0x49ee3835234651f4, after: 2955000000),
                Step(.push, on: 2, seed: 0x1ed1b93200ff8702, after: 787000000),
                Step(.write, on: 3, seed: 0xd39893f4f31b7eb4, after: 4852000000),
                Step(.pull, on: 0, seed: 0xd09f928598d1f638, after: 1635000000),
                Step(.download, on: 3, seed: 0x54fca34a028bca35, after: 1787000000),
                Step(.create, on: 1, seed: 0x6f67aacfe65a1515, after: 0),
                Step(.write, on: 2, seed: 0xf82b9d4c1cf70b3b, after: 2855000000),
                Step(.create, on: 1, seed: 0xf1cdcd67fa566d7c, after: 3364000000),
                Step(.push, on: 0, seed: 0x930a812497e18311, after: 0),
                Step(.rmdir, on: 2, seed: 0x1375ab17a97a1c50, after: 3012000000),
                Step(.push, on: 2, seed: 0x1edec92f116a2ea5, after: 2350000000),
                Step(.pull, on: 2, seed: 0x7d7d2be7cb14fef, after: 2181000000),
                Step(.create, on: 3, seed: 0x5f6a19646fc95eed, after: 617000000),
                Step(.mkdir, on: 0, seed: 0xec61a75301f342cc, after: 636000000),
                Step(.create, on: 2, seed: 0x68e3d67cd8784878, after: 1545000000),
                Step(.append, on: 0, seed: 0x2b318664a7a0bb18, after: 4812000000),
                Step(.create, on: 2, seed: 0x40360cae680acf4a, after: 1289000000),
                Step(.push, on: 1, seed: 0x9702b9405fb88663, after: 4724000000),
                Step(.move, on: 3, seed: 0x4131464c55321849, after: 4674000000),
                Step(.create, on: 1, seed: 0x7664c96d44e503f4, after: 876000000),
                Step(.truncate, on: 1, seed: 0x724623456611f2a, after: 2023000000),
                Step(.download, on: 1, seed: 0x90af6704f558d9a6, after: 0),
                Step(.crash, on: 2, seed: 0xdc54bd5575653f2f, after: 1301000000),
                Step(.push, on: 0, seed: 0x8cd0a8d08778b229, after: 3291000000),
                Step(.promote, on: 0, seed: 0xf8f1d98ca7092b9a, after: 124000000),
                Step(.move, on: 1, seed: 0x4ec2167829382bda, after: 3808000000),
                Step(.append, on: 0, seed: 0x4cc177b4fc158818, after: 4017000000),
                Step(.pull, on: 1, seed: 0xf2a7e0a6cac5ec8a, after: 357000000),
                Step(.rmdir, on: 2, seed: 0xfb658031a25da816, after: 3198000000),
                Step(.rename, on: 2, seed: 0x7fd4b48493c6423f, after: 241000000),
                Step(.crash, on: 0, seed: 0xb637597060bef32b, after: 0),
                Step(.create, on: 0, seed: 0x83b2d503bfd525b6, after: 2367000000),
                Step(.keepCurrent, on: 3, seed: 0xf6fc770aa3db8b37, after: 1643000000),
                Step(.promote, on: 0, seed: 0xd5b8dc96c29bf127, after: 2096000000),
                Step(.download, on: 1, seed: 0xc1b004e82bdae849, after: 3991000000),
                Step(.pull, on: 2, seed: 0xc2a794d96d018e68, after: 4179000000),
                Step(.write, on: 2, seed: 0xa0f2e861611f3e68, after: 3541000000),
                Step(.beginWrite, on: 3, seed: 0x9578e0512f054957, after: 2820000000),
                Step(.discard, on: 2, seed: 0x9e65fbcd42bb1ad8, after: 2355000000),
                Step(.create, on: 1, seed: 0x6fc671aea8b101e, after: 4589000000),
                Step(.push, on: 3, seed: 0x68d5b99676c0ac58, after: 2912000000),
                Step(.create, on: 0, seed: 0x2ce340ae5690f3ea, after: 2011000000),
                Step(.move, on: 3, seed: 0x9a4caacddd0d7eca, after: 795000000),
                Step(.push, on: 3, seed: 0x129522f73df4b4d, after: 3144000000),
                Step(.write, on: 0, seed: 0xa87f6c9b796a5c2d, after: 3536000000),
                Step(.download, on: 2, seed: 0xb3cda485869c6234, after: 3316000000),
                Step(.move, on: 1, seed: 0xa0e1bca853b7ef59, after: 4734000000),
                Step(.rename, on: 3, seed: 0x36c0bddf7d959bc8, after: 2848000000),
                Step(.rmdir, on: 0, seed: 0xc8d93ee71b316d1e, after: 3200000000),
                Step(.push, on: 3, seed: 0x9ab282bd807d41b3, after: 3716000000),
                Step(.move, on: 0, seed: 0x16b712c39d8fa24c, after: 1926000000),
                Step(.push, on: 3, seed: 0xa721f3f44de219c1, after: 4245000000),
                Step(.promote, on: 0, seed: 0x2aecbfb18b82275c, after: 517000000),
                Step(.pull, on: 3, seed: 0x2d6433e9b8c0ef9d, after: 3500000000),
                Step(.download, on: 3, seed: 0xfd5cd60821b1c79c, after: 2861000000),
                Step(.move, on: 1, seed: 0xdfa4a93f77c87d, after: 240000000),
                Step(.append, on: 3, seed: 0x7c013d0d44d2e1a7, after: 601000000),
                Step(.rename, on: 2, seed: 0xd49cae66fd9706de, after: 3029000000),
                Step(.download, on: 3, seed: 0x15d34427c7306de8, after: 609000000),
                Step(.download, on: 2, seed: 0x30b3f89bea28d45d, after: 309000000),
                Step(.truncate, on: 3, seed: 0xee25dc5272f59a9e, after: 3254000000),
                Step(.keepCurrent, on: 2, seed: 0x368d77858cecce13, after: 979000000),
                Step(.create, on: 2, seed: 0x7218c5747174ec73, after: 1636000000),
                Step(.crash, on: 0, seed: 0x2090a43b9dbbfc45, after: 646000000),
                Step(.download, on: 3, seed: 0xc28a168baaa908b2, after: 537000000),
                Step(.evict, on: 2, seed: 0x480741b5d55f28f3, after: 2023000000),
                Step(.keepCurrent, on: 1, seed: 0x12bd2da304c19c38, after: 1982000000),
                Step(.rename, on: 2, seed: 0xcb12075286e73fb8, after: 3093000000),
                Step(.heal, on: 0, seed: 0xd6ca03692672636a, after: 3846000000),
                Step(.heal, on: 1, seed: 0xb3416abd1f958449, after: 0),
                Step(.write, on: 2, seed: 0xae6508926e73b460, after: 45000000),
                Step(.push, on: 3, seed: 0xb1e23f5af4224d59, after: 491000000),
                Step(.mkdir, on: 1, seed: 0xc9b9de2424add862, after: 0),
             ]))

    /// b discarded a conflict version of a file; c revived the file over b's delete with its edit, listing
    /// that version again, and deleted it later. b's puller took the revival and kept b's discard of the
    /// version (a change to push); that push met c's tombstone and counted the discard as an edit made here:
    /// edit wins over delete, and the file came back. Discarding conflict versions of a file is no edit a
    /// delete must yield to. (64 steps of seed 31013301's plan.)
    static let discardedConflictIsNoEditAgainstADelete = Regression(
        "discardedConflictIsNoEditAgainstADelete",
        Plan(seed: 31013301, devices: 4, feedPage: 3,
             rates: FaultRates(dropRequest: 0.06, dropResponse: 0.03, duplicate: 0.06, staleFeed: 0.07,
                               slowTransfer: 0.11, corrupt: 0.0),
             steps: [
                Step(.pull, on: 1, seed: 0x3a63b2aa0c0401f0, after: 4398000000),
                Step(.pull, on: 0, seed: 0xbbafb6ebcc19e455, after: 1947000000),
                Step(.create, on: 1, seed: 0x37bbdc801765d867, after: 981000000),
                Step(.create, on: 1, seed: 0x7bf9779227bdea49, after: 4731000000),
                Step(.mkdir, on: 0, seed: 0xce8c0dc38779afc7, after: 0),
                Step(.mkdir, on: 1, seed: 0x7fd090e5b6e0f0ba, after: 4542000000),
                Step(.mkdir, on: 1, seed: 0x23f07ef116f713fa, after: 4361000000),
                Step(.append, on: 2, seed: 0x854f6996b9e2df15, after: 1913000000),
                Step(.push, on: 0, seed: 0x8c675c5fc7cace27, after: 3197000000),
                Step(.create, on: 1, seed: 0x6639b4a770f41035, after: 3742000000),
                Step(.pull, on: 2, seed: 0x35666bc6834bf44f, after: 2804000000),
                Step(.push, on: 1, seed: 0x97362870e6493fea, after: 4261000000),
                Step(.discard, on: 3, seed: 0xf464bf1accef60c0, after: 4007000000),
                Step(.pull, on: 0, seed: 0x1c0950b5db10b95a, after: 2893000000),
                Step(.truncate, on: 1, seed: 0xef1e8040946d4786, after: 2225000000),
                Step(.rename, on: 2, seed: 0x5921d47e08f0226d, after: 3923000000),
                Step(.write, on: 0, seed: 0x88dc8f98a52c4bb4, after: 3373000000),
                Step(.push, on: 1, seed: 0x2eded9e11c00356f, after: 0),
                Step(.push, on: 2, seed: 0x8ca9f350d182e897, after: 0),
                Step(.write, on: 0, seed: 0xbb4bddd70788f5f9, after: 4279000000),
                Step(.push, on: 1, seed: 0x1b15190855195dc8, after: 3915000000),
                Step(.pull, on: 0, seed: 0x216f0486c7605ac8, after: 1912000000),
                Step(.write, on: 2, seed: 0xbd353294d8e56f32, after: 4953000000),
                Step(.rename, on: 1, seed: 0x65cc159ac8f5bb43, after: 0),
                Step(.pull, on: 1, seed: 0xd134edbfd7df6908, after: 2544000000),
                Step(.move, on: 1, seed: 0x9affc0699e536ed3, after: 907000000),
                Step(.pull, on: 2, seed: 0x95c7097864bcf12a, after: 0),
                Step(.crash, on: 0, seed: 0x6f90793e1977f52d, after: 916000000),
                Step(.push, on: 1, seed: 0xc5b9cd9aa439ecc, after: 701000000),
                Step(.promote, on: 0, seed: 0x8d71dd71749d5968, after: 1969000000),
                Step(.create, on: 1, seed: 0x4d49214b5c184f4e, after: 1331000000),
                Step(.create, on: 1, seed: 0x81e80849d568b847, after: 0),
                Step(.create, on: 2, seed: 0xd1e46b877c534db0, after: 3697000000),
                Step(.write, on: 3, seed: 0x7d7e0022f66f0cfb, after: 1663000000),
                Step(.push, on: 1, seed: 0x8d3f15f5c80b8d04, after: 2405000000),
                Step(.push, on: 0, seed: 0xe6182378fd2cdca4, after: 2376000000),
                Step(.pull, on: 2, seed: 0xaf247a6548c99582, after: 869000000),
                Step(.truncate, on: 2, seed: 0x6c2d6721f4a5991c, after: 3061000000),
                Step(.download, on: 0, seed: 0x8e7d84390f140fe5, after: 2156000000),
                Step(.keepCurrent, on: 0, seed: 0x97f5ae26bc2d7c90, after: 4159000000),
                Step(.delete, on: 1, seed: 0xa5884b267323bcee, after: 0),
                Step(.push, on: 2, seed: 0x1f23c30bc91155fd, after: 3177000000),
                Step(.write, on: 1, seed: 0xd702cfb85c1f800f, after: 133000000),
                Step(.move, on: 2, seed: 0xfe814219e4d5c855, after: 3481000000),
                Step(.push, on: 1, seed: 0x34513f42180bd2d8, after: 1398000000),
                Step(.create, on: 2, seed: 0x91d9aedf9e9b9e33, after: 0),
                Step(.pull, on: 2, seed: 0x48c362026a9d8ed2, after: 0),
                Step(.discard, on: 1, seed: 0xf93e5a5e43fa0745, after: 3013000000),
                Step(.promote, on: 3, seed: 0xc3d89b65bdda5a7d, after: 4044000000),
                Step(.heal, on: 0, seed: 0xdb1dca5cafc6433, after: 0),
                Step(.push, on: 1, seed: 0xaa419f8690ae5635, after: 3562000000),
                Step(.delete, on: 1, seed: 0xc5d6cc245aa47e8c, after: 3465000000),
                Step(.pull, on: 1, seed: 0x8586be36b1058c8a, after: 2904000000),
                Step(.create, on: 2, seed: 0x36828ffce122afac, after: 4815000000),
                Step(.truncate, on: 2, seed: 0x2cf2098e88cd648b, after: 668000000),
                Step(.push, on: 1, seed: 0x4db8b28a01d2328d, after: 1017000000),
                Step(.delete, on: 2, seed: 0x7dca78daee2a14f3, after: 2848000000),
                Step(.push, on: 2, seed: 0x7e858f8a0dcd61be, after: 1983000000),
                Step(.chmod, on: 2, seed: 0x69d7877073a6685c, after: 4876000000),
                Step(.pull, on: 1, seed: 0xe0b5fe897a5202a, after: 962000000),
                Step(.push, on: 0, seed: 0xe6eeb33463aeae0a, after: 4422000000),
                Step(.move, on: 2, seed: 0x4b1b424c9deb4760, after: 2434000000),
                Step(.delete, on: 2, seed: 0x4baca87c8862613d, after: 3292000000),
                Step(.push, on: 2, seed: 0xc05eb3e43d8b2d52, after: 2835000000),
             ]))

    /// d exchanged two folders; one stepped aside on the remote (under a name of its own) and that answer was
    /// lost; then d emptied and deleted that folder. The delete met the step aside as a newer version by
    /// another author (the folder's creator) and brought d's own deleted folder back. A step aside changes
    /// nothing but the name. (18 steps of seed 61002681's plan.)
    static let deleteAfterOwnStepAside = Regression(
        "deleteAfterOwnStepAside",
        Plan(seed: 61002681, devices: 4, feedPage: 4,
             rates: FaultRates(dropRequest: 0.01, dropResponse: 0.11, duplicate: 0.02, staleFeed: 0.04,
                               slowTransfer: 0.02, corrupt: 0.01),
             steps: [
                Step(.pull, on: 2, seed: 0x29977f691a128474, after: 3359000000),
                Step(.pull, on: 0, seed: 0x8f0d1fe6027e10c9, after: 987000000),
                Step(.create, on: 2, seed: 0xe9610507b9788f22, after: 3644000000),
                Step(.create, on: 0, seed: 0x2c3df927a19da46, after: 4899000000),
                Step(.mkdir, on: 2, seed: 0xaf72a599d743b7da, after: 1734000000),
                Step(.push, on: 0, seed: 0x5ae15560c171b177, after: 567000000),
                Step(.pull, on: 2, seed: 0xb2242d42208123c7, after: 4131000000),
                Step(.mkdir, on: 2, seed: 0x1013d20b972418e5, after: 4642000000),
                Step(.push, on: 2, seed: 0x59a1f6f553e9200a, after: 1963000000),
                Step(.pull, on: 3, seed: 0x90642572dacf8e2a, after: 1209000000),
                Step(.delete, on: 3, seed: 0x6cdfe10133b108aa, after: 1199000000),
                Step(.create, on: 3, seed: 0x4a7b0b6ce966c800, after: 801000000),
                Step(.create, on: 3, seed: 0xf24178944db6b777, after: 2589000000),
                Step(.push, on: 3, seed: 0xec4d019a5d64f3a2, after: 2640000000),
                Step(.exchange, on: 3, seed: 0xa5ca2589bcaf4e94, after: 3314000000),
                Step(.push, on: 3, seed: 0x3c84f2d7ed26731b, after: 447000000),
                Step(.delete, on: 3, seed: 0xe9f18214bcb1c45a, after: 3108000000),
                Step(.rmdir, on: 3, seed: 0xcfb09c583f713ab4, after: 576000000),
             ]))

    /// Every recorded shrunk trace.
    static let traces: [Regression] = [
        deleteAfterLostAnswer,
        deleteAfterLostAnswerAndAFurtherChange,
        folderDeletedAfterItsFile,
        deleteAfterOwnLostAnswer1,
        deleteAfterOwnLostAnswer2,
        deleteKeepsNoConflictCopies,
        resolvedConflictStaysResolvedWhenTheFileComesBack,
        revivedTombstoneDropsItsConflictList,
        renamedOverThenMovedAway,
        renameOfADetachedItemKeepsTheNewOwnersName,
        unpushedConflictVersionSurvivesANewerRemoteList1,
        unpushedConflictVersionSurvivesANewerRemoteList2,
        landedWriteNotWrittenAgain1,
        landedWriteNotWrittenAgain2,
        landedWriteNotWrittenAgain3,
        landedWriteNotWrittenAgain4,
        createWhoseAnswerWasLostMeetsAnEmptiedFile1,
        createWhoseAnswerWasLostMeetsAnEmptiedFile2,
        landedCreateChangedElsewhere,
        landedWriteMovedThenDeleted,
        editBelowDeletedFolderContestsIt,
        restoredItemKeepsItsRemoteName,
        folderRevivedOverTombstone,
        folderDeleteWaitsForItsChildMovedOut,
        folderRevivedWhereTheRemoteLastHadIt,
        staleBatchRefusalAfterTheItemWasPushed,
        deleteAfterOwnLandedRename,
        deleteMeetsALandedCreateMovedOutOfTheWay,
        landedCreateAcknowledgedWithItsSize,
        oneStuckItemDoesNotHoldBackTheBatch,
        oneStuckItemDoesNotHoldBackTheBatch2,
        discardedConflictIsNoEditAgainstADelete,
        deleteAfterOwnStepAside,
    ]
}
