// swift-tools-version:6.0
// ubiquityfs: a FUSE file system for an iCloud-style ubiquity container.
// Only the toolchain and Debian's C libraries are used: no outside Swift package.
import PackageDescription

let package = Package(
    name: "ubiquityfs",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "ubiquityfs", targets: ["ubiquityfs"]),
        .executable(name: "ubiquity-simulate", targets: ["ubiquity-simulate"]),
    ],
    targets: [
        // C libraries from Debian, each behind a module map and a tiny header of inline shims.
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSys"),
        // FUSE passthrough on libfuse 3.14 (which has no API for it): a custom io amending INIT and open replies.
        .target(name: "CPassthrough", dependencies: ["CFuse"]),

        // Shared plumbing: SQLite, SHA-256, logging, wire model, system calls.
        .target(name: "UbiquityBase", dependencies: ["CSQLite", "CCrypto", "CSys"]),
        // The sync core: store, transfers, sync. Knows nothing of FUSE or HTTP.
        .target(name: "UbiquityCore", dependencies: ["UbiquityBase"]),
        // The remote client on libcurl, implementing the core's RemoteClient protocol.
        .target(name: "UbiquityHTTP", dependencies: ["UbiquityBase", "UbiquityCore", "CCurl"]),
        // The remote stub server on libmicrohttpd; its metadata in SQLite or PostgreSQL (libpq), its blobs in
        // files or S3 (libcurl).
        .target(name: "UbiquityStub", dependencies: ["UbiquityBase", "CMicroHTTPD", "CPostgres", "CCurl", "CCrypto"]),
        // The FUSE adapter: inode table and operations mapped onto the core. Knows nothing of HTTP.
        .target(name: "UbiquityFUSE", dependencies: ["UbiquityBase", "UbiquityCore", "CFuse", "CPassthrough"]),
        // The command.
        .executableTarget(name: "ubiquityfs",
                          dependencies: ["UbiquityBase", "UbiquityCore", "UbiquityHTTP", "UbiquityStub", "UbiquityFUSE", "CFuse"]),

        // The deterministic multi-device simulation of the sync core (issue 7), and its command.
        // Test support, linked by the simulation and the tests only (never by `ubiquityfs`): MemoryRemote, and a SeaweedFS S3 gateway for the tests (SeaweedFS.swift).
        .target(name: "UbiquityTesting", dependencies: ["UbiquityBase", "UbiquityCore"]),
        .target(name: "UbiquitySim", dependencies: ["UbiquityBase", "UbiquityCore", "UbiquityTesting"]),
        .executableTarget(name: "ubiquity-simulate", dependencies: ["UbiquitySim"]),

        .testTarget(name: "UbiquityCoreTests", dependencies: ["UbiquityBase", "UbiquityCore", "UbiquityTesting"]),
        .testTarget(name: "UbiquitySimTests", dependencies: ["UbiquitySim"]),
        .testTarget(name: "UbiquityFUSETests",
                    dependencies: ["UbiquityFUSE", "CFuse", "UbiquityBase", "UbiquityCore", "UbiquityTesting"]),
        // The adapter against a model of POSIX plus the sync rules: random operations, no kernel (ARCHITECTURE.md).
        .testTarget(name: "UbiquityReferenceModelTests",
                    dependencies: ["UbiquityFUSE", "UbiquityBase", "UbiquityCore", "UbiquityTesting"]),
        .testTarget(name: "UbiquityStubTests",
                    dependencies: ["UbiquityBase", "UbiquityCore", "UbiquityStub", "UbiquityHTTP", "UbiquityTesting",
                                   "UbiquitySim"]),
        // One suite of the RemoteClient promises (docs/WIRE.md), run against every backend.
        .testTarget(name: "UbiquityRemoteConformanceTests",
                    dependencies: ["UbiquityBase", "UbiquityCore", "UbiquityTesting", "UbiquityStub", "UbiquityHTTP"]),
    ]
)
