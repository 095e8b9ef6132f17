// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Fingerly",
    products: [
        .library(name: "Fingerly", targets: ["Fingerly"]),
        .executable(name: "fingerly-identify", targets: ["fingerly-identify"]),
    ],
    targets: [
        // System libraries from Debian, found through pkg-config.
        .systemLibrary(name: "CUdev", pkgConfig: "libudev", providers: [.apt(["libudev-dev"])]),
        .systemLibrary(name: "CBlkid", pkgConfig: "blkid", providers: [.apt(["libblkid-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),

        // What Swift cannot call directly: inline asm (CPUID).
        .target(name: "CFingerlyShims", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),

        .target(
            name: "Fingerly",
            dependencies: ["CCrypto", "CUdev", "CBlkid", "CFingerlyShims"],
            resources: [
                // Symlinks to the top-level probes/ and policies/ data, compiled into the binary
                // so an installed copy never looks for the build tree.
                .embedInCode("Embedded/catalogue.json"),
                .embedInCode("Embedded/tables.json"),
                .embedInCode("Embedded/default-policy.json"),
            ]
        ),
        .target(name: "FingerlyIdentifyCommand", dependencies: ["Fingerly"]),
        .executableTarget(name: "fingerly-identify", dependencies: ["FingerlyIdentifyCommand"]),

        .testTarget(
            name: "FingerlyTests",
            dependencies: ["Fingerly", "FingerlyIdentifyCommand", "CUdev", "CBlkid"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
