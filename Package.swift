// swift-tools-version:6.0
import PackageDescription

// The C ABI's link flags need absolute paths: SwiftPM does not promise the linker's working directory.
let packageDirectory = String(#filePath.dropLast("/Package.swift".count))

// Relative relocations packed (DT_RELR, glibc 2.36 and later): the CLI's 40,000 took 960 KB of .rela.dyn that each
// start paged in; lld packs them into 8 KB, which gold, the driver's default, cannot.
let packedRelocations = ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs"]

// Layers, each a target so the compiler keeps them apart:
//   FingerlyModel   the report's value types, the JSON reader; no I/O, no dependencies
//   FingerlyHost    every read of the measured host, syscall wrappers, the C shims
//   FingerlyCatalogue  the probe catalogue, the detection tables and identity derivation; data, no device library
//   FingerlyProbes  the probes and their context (libudev, libblkid)
//   FingerlyPolicy  the policy, the verdict engine and the suspect score; bytes in, verdicts out
//   FingerlyTransport  HTTP over libcurl, retries, signatures, the outbox; bytes in, bytes out
//   FingerlyStore   the identity store interface, its limits and the blob codec; no database library
//   FingerlySQLiteStore  the store over SQLite (the local mode and the server)
//   FingerlyPostgresStore  the store over libpq (the server alone)
//   FingerlyEngine  visitor resolution, idempotency, scoring; shared by the server and the local mode
//   FingerlyServer  fingerly-server: HTTP over libmicrohttpd in front of the engine, SQLite or PostgreSQL
//   Fingerly        the scheduler and the SDK; the only public surface (with FingerlyModel)
// FingerlyProbes cannot see FingerlyPolicy, and FingerlyPolicy cannot see FingerlyHost. Only the server
// reaches libpq and libmicrohttpd, and it never sees the probes: fingerly-identify and libfingerly.so
// load neither.
let package = Package(
    name: "Fingerly",
    products: [
        .library(name: "Fingerly", targets: ["Fingerly"]),
        .executable(name: "fingerly-identify", targets: ["fingerly-identify"]),
        .executable(name: "fingerly-server", targets: ["fingerly-server"]),
        // libfingerly.so: the C ABI (include/fingerly.h) for programs not written in Swift.
        .library(name: "fingerly", type: .dynamic, targets: ["FingerlyC"]),
    ],
    targets: [
        // System libraries from Debian, found through pkg-config.
        // Headers only: CFingerlyDevices opens libudev and libblkid on the first call into them.
        .systemLibrary(name: "CUdev", providers: [.apt(["libudev-dev"])]),
        .systemLibrary(name: "CBlkid", providers: [.apt(["libblkid-dev"])]),
        // Headers only: CFingerlyTLS opens libcrypto on the first call into it (crypto_loader.c).
        .systemLibrary(name: "CCrypto", providers: [.apt(["libssl-dev"])]),
        // libcurl's header alone (libcurl4-openssl-dev): CFingerlyCurl opens the library at the first send, so
        // no pkg-config name here, whose flags would link it into every product.
        .systemLibrary(name: "CCurl"),
        // Headers only: CFingerlySQLite opens libsqlite3 on the first call into it (sqlite_loader.c).
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),

        // What Swift cannot call directly (inline asm, raw system calls, ioctls, OpenSSL's macros),
        // one target per concern. Each hands back C structs, called only through FingerlyHost.
        .target(name: "CFingerlyCPUID"),
        .target(name: "CFingerlySHA256"),
        // The bounded, UTF-8-safe copy every shim fills its text fields with.
        .target(name: "CFingerlyText"),
        .target(name: "CFingerlyIntegrity", dependencies: ["CFingerlyText"]),
        // Opening a library on first use, for the C shims that do (libcurl, libsqlite3, libssl, libcrypto, libudev,
        // libblkid).
        .target(name: "CFingerlyLazyLibrary"),
        // libcrypto and libssl are opened on first use (crypto_loader.c, ssl_loader.c).
        .target(name: "CFingerlyTLS", dependencies: ["CFingerlyText", "CFingerlyLazyLibrary"]),
        .target(name: "CFingerlyNetDevice"),
        .target(name: "CFingerlyFiles"),
        .target(name: "CFingerlyCurl", dependencies: ["CFingerlyLazyLibrary"]),
        .target(name: "CFingerlySQLite", dependencies: ["CFingerlyLazyLibrary"]),
        .target(name: "CFingerlyDevices", dependencies: ["CFingerlyLazyLibrary"]),
        .target(name: "CFingerlyHTTPD", linkerSettings: [.linkedLibrary("microhttpd")]),
        .target(name: "CFingerlyAllocator"),

        .target(name: "FingerlyModel"),
        .target(name: "FingerlyHost",
                dependencies: ["CFingerlyCPUID", "CFingerlyIntegrity", "CFingerlyTLS", "CFingerlyNetDevice", "CFingerlyFiles",
                               "CFingerlySHA256"]),
        // The catalogue, the tables and the default policy are compiled in as Swift values that
        // scripts/generate-embedded-data writes from probes/ and policies/: an installed copy never looks
        // for the build tree, and no process decodes JSON to start.
        .target(name: "FingerlyCatalogue", dependencies: ["FingerlyModel", "FingerlyHost", "CCrypto"]),
        .target(name: "FingerlyProbes", dependencies: ["FingerlyModel", "FingerlyHost", "FingerlyCatalogue", "CCrypto", "CUdev", "CBlkid",
                                                     "CFingerlyDevices"]),
        .target(
            name: "FingerlyPolicy",
            dependencies: ["FingerlyModel"],
            // Without it, Foundation's members (String(contentsOfFile:)…) would reach this target
            // through FingerlyModel's import: the engine must not be able to read a file.
            swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]
        ),
        // Sending: HTTP over libcurl, retries, request signatures, the durable outbox. It knows
        // bytes and files of its own, never the report's types, the probes or the policy.
        .target(name: "FingerlyTransport", dependencies: ["FingerlyHost", "CCurl", "CFingerlyCurl", "CCrypto"]),
        // Where identities and events are kept: an interface narrow enough for SQLite and PostgreSQL.
        // The interface depends on no database library, so what links it alone loads neither.
        .target(name: "FingerlyStore", dependencies: ["FingerlyHost", "CCrypto", "CLZ4"]),
        .target(name: "FingerlySQLiteStore", dependencies: ["FingerlyStore", "FingerlyHost", "CSQLite", "CFingerlySQLite"]),
        .target(name: "FingerlyPostgresStore", dependencies: ["FingerlyStore", "FingerlyHost", "CPostgres"]),
        // Visitor resolution, idempotency and scoring, shared by the server and the local mode; no HTTP.
        .target(name: "FingerlyEngine", dependencies: ["FingerlyModel", "FingerlyHost", "FingerlyPolicy", "FingerlyCatalogue", "FingerlyStore"]),
        .target(name: "FingerlyServer", dependencies: ["FingerlyModel", "FingerlyHost", "FingerlyEngine", "FingerlyStore", "FingerlySQLiteStore",
                                                        "FingerlyPostgresStore", "FingerlyTransport",
                                                        "CMicroHTTPD", "CFingerlyHTTPD", "CFingerlyAllocator"]),
        .executableTarget(name: "fingerly-server", dependencies: ["FingerlyServer"],
                          linkerSettings: [.unsafeFlags(packedRelocations)]),
        .target(name: "Fingerly", dependencies: ["FingerlyModel", "FingerlyHost", "FingerlyCatalogue", "FingerlyProbes", "FingerlyPolicy",
                                                 "FingerlyTransport", "FingerlyEngine", "FingerlyStore", "FingerlySQLiteStore"]),
        .target(name: "FingerlyIdentifyCommand", dependencies: ["Fingerly", "FingerlyModel", "FingerlyHost", "FingerlyCatalogue", "FingerlyProbes",
                                                                "FingerlyPolicy", "FingerlyTransport"]),
        .executableTarget(name: "fingerly-identify", dependencies: ["FingerlyIdentifyCommand"],
                          linkerSettings: [.unsafeFlags(packedRelocations)]),
        // The C entry points behind libfingerly.so. The Swift runtime is linked in (-static-stdlib) so
        // a C program needs no toolchain on the loader's path; the version script exports fingerly_*
        // alone (the runtime's symbols stay local, so a host with its own Swift runtime keeps it).
        .target(
            name: "FingerlyC",
            dependencies: ["Fingerly", "FingerlyHost", "FingerlyModel"],
            exclude: ["fingerly.map"],
            linkerSettings: [.unsafeFlags(["-static-stdlib",
                                           "-Xlinker", "-soname=libfingerly.so.0", "-Xlinker", "--no-export-dynamic",
                                           "-Xlinker", "--version-script=\(packageDirectory)/Sources/FingerlyC/fingerly.map",
                                           // A shared object may keep undefined symbols; this one must not, or a C
                                           // program fails at its own link. FoundationEssentials' static parts, which
                                           // the driver's autolinking leaves out of a shared object, are named here; full
                                           // Foundation, and the ICU data it carries, is used nowhere.
                                           "-Xlinker", "--no-undefined",
                                           "-Xlinker", "--start-group",
                                           "-Xlinker", "-lFoundationEssentials", "-Xlinker", "-l_FoundationCShims",
                                           "-Xlinker", "-l_FoundationCollections", "-Xlinker", "-lswiftDispatch",
                                           "-Xlinker", "-ldispatch", "-Xlinker", "-lBlocksRuntime", "-Xlinker", "-lswiftSynchronization",
                                           "-Xlinker", "--end-group",
                                           // Never unmapped by dlclose: the runtime's and the kept probe
                                           // threads would go on running its code.
                                           "-Xlinker", "-z", "-Xlinker", "nodelete"] + packedRelocations)]
        ),

        .testTarget(
            name: "FingerlyTests",
            dependencies: ["Fingerly", "FingerlyModel", "FingerlyHost", "FingerlyProbes", "FingerlyPolicy",
                           "FingerlyIdentifyCommand", "FingerlyTransport", "FingerlyStore", "FingerlySQLiteStore",
                           "FingerlyPostgresStore", "FingerlyCatalogue", "FingerlyEngine", "FingerlyServer",
                           "CFingerlyFiles", "CUdev", "CBlkid", "CCrypto", "CFingerlyDevices"]
        ),
        // Only what an application sees: `import Fingerly`, no @testable.
        .testTarget(name: "FingerlyExampleTests", dependencies: ["Fingerly"]),
    ],
    swiftLanguageModes: [.v6]
)

// Concrete generic types (a [String: String], a Set of an enum) are reached through their metadata accessors
// rather than by mangled name: demangling one at run time scans every protocol conformance of the program
// to check its generic requirements, and that was a tenth of a fast-tier run's instructions.
for target in package.targets where target.type == .regular || target.type == .executable {
    target.swiftSettings = (target.swiftSettings ?? [])
        + [.unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"])]
}
