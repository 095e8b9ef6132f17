import FingerlyHost
import Testing

/// The installation secret, per-run keys and idempotency keys are drawn through `randomBytes`, which
/// now spends all eight bytes of each generator call.
@Suite struct RandomBytesTests {
    @Test(arguments: [0, 1, 7, 8, 9, 16, 31, 32, 33])
    func givesExactlyTheCountAskedFor(count: Int) {
        #expect(randomBytes(count).count == count)
    }

    @Test func drawsDifferAndUseEveryBytePosition() {
        let first = randomBytes(32), second = randomBytes(32)
        #expect(first != second)
        // A byte left at zero in every draw would show a position the word was never shifted into.
        var seen = [UInt8](repeating: 0, count: 32)
        for _ in 0..<16 { for (index, byte) in randomBytes(32).enumerated() { seen[index] |= byte } }
        #expect(!seen.contains(0))
    }
}
