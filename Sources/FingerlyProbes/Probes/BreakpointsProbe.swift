import FingerlyHost
import FingerlyModel

/// Software breakpoints (int3, 0xCC) planted at the entry of this library's own functions and
/// at the dynamic loader's debugger hook. Inspects this process, so it skips root trees.
package struct BreakpointsProbe: Probe {
    package let id = "breakpoints"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        guard context.host.isLiveHost else { throw ProbeFailure(.skipped, "inspects this process's code; a root tree has none") }
        var found: [String] = []
        for (name, address) in Self.watchedEntries() {
            guard let address, Self.startsWithBreakpoint(address) else { continue }
            found.append(name)
        }
        context.emit("debug.breakpoints", found)
    }

    static func watchedEntries() -> [(String, UnsafeRawPointer?)] {
        let collect: @convention(c) () -> Void = fingerlyCollectEntry
        return [
            ("_r_debug.r_brk", ProcessIntegrity.loaderBreakpointAddress),
            ("fingerly_raw_read_file", ProcessIntegrity.shimEntry),
            ("fingerly_collect_entry", unsafeBitCast(collect, to: UnsafeRawPointer?.self)),
        ]
    }

    static func startsWithBreakpoint(_ address: UnsafeRawPointer) -> Bool {
        #if arch(x86_64) || arch(i386)
        return address.load(as: UInt8.self) == 0xCC
        #elseif arch(arm64)
        // BRK #imm: 0xd4200000 with the immediate in bits 5-20.
        return address.loadUnaligned(as: UInt32.self) & 0xFFE0_001F == 0xD420_0000
        #else
        return false
        #endif
    }
}

/// Called at the start of every collection: a debugger that breaks on Fingerly's entry plants
/// its breakpoint here, which the breakpoints probe then sees.
@_cdecl("fingerly_collect_entry")
package func fingerlyCollectEntry() {}
