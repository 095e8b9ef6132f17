import CBlkid
import CFingerlyDevices
import CUdev
import Testing

/// The system-library targets resolve against Debian's headers, and the stand-ins open the libraries behind
/// them on the first call (CFingerlyDevices), with every function the probes call.
@Suite struct SystemLibraryTests {
    @Test func libudevOpensOnFirstUseAndCreatesAContext() {
        let udev = udev_new()
        #expect(fingerly_udev_problem() == nil, "\(fingerly_udev_problem().map { String(cString: $0) } ?? "")")
        #expect(udev != nil)
        udev_unref(udev)
    }

    @Test func libblkidOpensOnFirstUseAndAllocatesAProbe() throws {
        let allocated = blkid_new_probe()
        #expect(fingerly_blkid_problem() == nil, "\(fingerly_blkid_problem().map { String(cString: $0) } ?? "")")
        let probe = try #require(allocated)
        #expect(blkid_probe_enable_superblocks(probe, 1) == 0)
        blkid_free_probe(probe)
    }
}
