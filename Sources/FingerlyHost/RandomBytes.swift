/// Bytes from the kernel's random pool: the standard library's generator is getrandom(2) on
/// Linux, which blocks until the pool is initialised and never returns weak bytes after. Each
/// call of the generator is one system call, so all eight bytes of each are used.
package func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count)
    while bytes.count < count {
        var word = generator.next()
        for _ in 0..<min(8, count - bytes.count) {
            bytes.append(UInt8(truncatingIfNeeded: word))
            word >>= 8
        }
    }
    return bytes
}
