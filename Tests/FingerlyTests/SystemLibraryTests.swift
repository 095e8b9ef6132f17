import CBlkid
import CUdev
import Testing

/// The system-library targets really resolve and link against Debian's libraries.
@Suite struct SystemLibraryTests {
    @Test func libudevCreatesAContext() {
        let udev = udev_new()
        #expect(udev != nil)
        udev_unref(udev)
    }

    @Test func libblkidReportsItsVersion() {
        var version: UnsafePointer<CChar>?
        let number = blkid_get_library_version(&version, nil)
        #expect(number >= 2000)
        #expect(version.map { String(cString: $0) }?.hasPrefix("2.") == true)
    }
}
