// OpenSSL frees its tables in an exit handler of its own. A thread still inside a TLS handshake or a hash when
// the process exits (a fetch of the remote on a background loop, as a mount that failed ends) then runs on freed
// memory and the process dies of SIGSEGV instead of exiting with its status. Told before OpenSSL's first use,
// OpenSSL registers no such handler: the kernel takes the memory back at exit as it takes everything else.
import CCrypto

public enum OpenSSLAtExit {
    /// Call first in a program's main, before anything hashes or connects.
    public static func leaveCleanupToTheKernel() {
        _ = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil)
    }
}
