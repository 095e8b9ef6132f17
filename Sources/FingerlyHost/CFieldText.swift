/// Text that a C accessor hands out as a pointer into a fixed-size field and a length up to its
/// NUL (the shims' `fingerly_*_text`-style accessors); bytes that are not UTF-8 become U+FFFD.
/// The accessors exist because naming an imported `char[N]` tuple in Swift makes the runtime build
/// the tuple's type metadata on first use, which for a 4096-byte path cost more than the listing.
func text(_ read: (UnsafeMutablePointer<UnsafePointer<CChar>?>) -> Int) -> String {
    var start: UnsafePointer<CChar>?
    let length = read(&start)
    guard let start, length > 0 else { return "" }
    return start.withMemoryRebound(to: UInt8.self, capacity: length) {
        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
    }
}
