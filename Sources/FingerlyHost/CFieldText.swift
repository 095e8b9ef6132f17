/// The text of a fixed-size `char[N]` field of a C struct (imported as a tuple), up to its NUL;
/// never past the field's end. Bytes that are not UTF-8 become U+FFFD.
func text<Field>(ofCField field: Field) -> String {
    withUnsafeBytes(of: field) { bytes in
        String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
    }
}
