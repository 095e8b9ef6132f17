/// Bytes from the kernel's random pool: the standard library's generator is getrandom(2) on
/// Linux, which blocks until the pool is initialised and never returns weak bytes after.
package func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
}
