#if canImport(Glibc)
import Glibc
#endif

/// libFuzzer's entry point. One binary carries every harness: linking the sanitized library once
/// instead of once per harness keeps the fuzz build inside CI's budget. FINGERLY_FUZZ_HARNESS picks one.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    selectedHarness(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

let selectedHarness: @Sendable ([UInt8]) -> Void = {
    let name = getenv("FINGERLY_FUZZ_HARNESS").map { String(cString: $0) } ?? ""
    guard let harness = Harnesses.all[name] else {
        let known = Harnesses.all.keys.sorted().joined(separator: ", ")
        fail("set FINGERLY_FUZZ_HARNESS to one of: \(known)")
    }
    return harness
}()

/// A harness that cannot run says so and stops, rather than reporting a crash in the code under test.
func fail(_ message: String) -> Never {
    let line = Array("fingerly-fuzz: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(2)
}
