// swift-tools-version:6.0
import PackageDescription

// The libFuzzer harnesses, a package of their own so that the main package's `swift build` and
// `swift test` never see a target without a main. Built only by scripts/fuzz, with sanitizers.
let package = Package(
    name: "FingerlyFuzz",
    dependencies: [.package(name: "Fingerly", path: "..")],
    targets: [
        .executableTarget(name: "fingerly-fuzz", dependencies: [.product(name: "Fingerly", package: "Fingerly")],
                          path: "Sources/FingerlyFuzz"),
    ],
    swiftLanguageModes: [.v6]
)
