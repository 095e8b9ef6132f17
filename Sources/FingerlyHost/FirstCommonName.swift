import CFingerlyTLS

/// A certificate subject's first common name, in the canonical form the impersonation check compares (C's walk,
/// without libcrypto). Two subjects libcrypto finds equal have equal names here, or one is `unknown`.
enum FirstCommonName: Hashable {
    case absent
    case found([UInt8])
    case unknown

    init(of der: ArraySlice<UInt8>) {
        var written = 0
        var name = [UInt8](repeating: 0, count: Int(FINGERLY_COMMON_NAME_SIZE))
        let state = der.withUnsafeBufferPointer { bytes in
            fingerly_first_common_name(bytes.baseAddress, bytes.count, &name, &written)
        }
        switch state {
        case 1: self = .found(Array(name.prefix(written)))
        case 0: self = .absent
        default: self = .unknown
        }
    }
}
