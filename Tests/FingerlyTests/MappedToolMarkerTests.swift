import Foundation
import Testing
@testable import FingerlyHost
@testable import FingerlyCatalogue
@testable import FingerlyProbes

/// Tool markers in this process's memory map are found on bytes: a combining mark or odd
/// Unicode in a mapped path must not hide a marker.
@Suite struct MappedToolMarkerTests {
    private static func markers(inMaps maps: String) throws -> [String] {
        let root = try TestPaths.temporaryDirectory("mapped-markers")
        try FileManager.default.createDirectory(atPath: root + "/proc/self", withIntermediateDirectories: true)
        try maps.write(toFile: root + "/proc/self/maps", atomically: true, encoding: .utf8)
        let context = ProbeContext(host: HostFileSystem(root: root), tables: .embedded, filter: .none,
                                   hasher: IdentifierHasher(organization: "acme"))
        try ProcessMapsProbe().collect(into: context)
        guard case .strings(let found)? = context.signals["process.mapped_tool_markers"] else {
            Issue.record("no marker signal: \(context.signals)")
            return []
        }
        return found
    }

    private static func line(_ path: String) -> String {
        "7f0000000000-7f0000001000 r-xp 00000000 fd:01 1234 \(path)\n"
    }

    @Test func aMarkerIsFoundWhateverFollowsItsLastLetter() throws {
        let combined = "/tmp/frida-agent\u{301}-64.so"
        let found = try Self.markers(inMaps: Self.line("/usr/lib/x86_64-linux-gnu/libc.so.6") + Self.line(combined)
                                     + Self.line("/opt/Valgrind/vgpreload_memcheck-amd64-linux.so"))
        // In the order of their paths.
        #expect(found == ["valgrind: /opt/Valgrind/vgpreload_memcheck-amd64-linux.so", "frida: \(combined)"], "\(found)")
    }

    @Test func aCleanMapHasNoMarkers() throws {
        let found = try Self.markers(inMaps: Self.line("/usr/lib/x86_64-linux-gnu/libc.so.6") + Self.line("[vdso]")
                                     + Self.line("/usr/lib/x86_64-linux-gnu/libfrid.so"))
        #expect(found.isEmpty, "\(found)")
    }

    @Test func byteContainmentAnswersEdgeCases() {
        #expect("abc".containsUTF8(""))
        #expect("abc".containsUTF8("abc"))
        #expect(!"ab".containsUTF8("abc"))
        #expect("xxabab".containsUTF8("abab"))
        #expect(!"aab".containsUTF8("abb"))
        #expect("e\u{301}".containsUTF8("e"), "String.contains says no here; the bytes are there")
        #expect(!"".containsUTF8("a"))
    }
}
