import Foundation
import Testing

/// What each built product loads: the collector and the C library never carry the server's
/// PostgreSQL and HTTP-serving libraries, and no product carries ICU's data (full Foundation's).
/// Read from the products `swift build` left beside the tests, with the system's own tools.
@Suite struct ProductLinkageTests {
    static let buildDirectory = TestPaths.packageRoot + "/.build/debug"
    static let collector = buildDirectory + "/fingerly-identify"
    static let library = buildDirectory + "/libfingerly.so"
    static let server = buildDirectory + "/fingerly-server"
    static let serverOnlyLibraries = ["libpq.so", "libmicrohttpd.so"]

    /// Every shared object the loader maps for `path`, one soname a line, as `ldd` resolves them.
    static func loadedLibraries(_ path: String) throws -> [String] {
        let listing = try runProcess("/usr/bin/ldd", [path])
        try #require(listing.status == 0, "ldd \(path): \(listing.standardError)")
        let names = listing.standardOutput.split(separator: "\n").compactMap {
            $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).first.map(String.init)
        }
        try #require(names.contains { $0.hasPrefix("libc.so") }, "ldd \(path) listed no libc: \(listing.standardOutput)")
        return names
    }

    /// The object's own symbol table and dynamic section as `readelf` prints them.
    static func symbolsAndNeeded(_ path: String) throws -> String {
        let dump = try runProcess("/usr/bin/readelf", ["-W", "--dyn-syms", "--syms", "--dynamic", path])
        try #require(dump.status == 0, "readelf \(path): \(dump.standardError)")
        try #require(dump.standardOutput.contains("(NEEDED)"), "readelf \(path) printed no dynamic section")
        return dump.standardOutput
    }

    @Test(arguments: [collector, library])
    func theCollectorAndTheLibraryLoadNoServerLibrary(_ path: String) throws {
        let loaded = try Self.loadedLibraries(path)
        for library in Self.serverOnlyLibraries {
            #expect(!loaded.contains { $0.hasPrefix(library) }, "\(path) loads \(library): \(loaded)")
        }
        let needed = try Self.symbolsAndNeeded(path)
        for library in Self.serverOnlyLibraries {
            #expect(!needed.contains("[\(library)"), "\(path) names \(library) as NEEDED")
        }
    }

    @Test func theServerStillLoadsPostgreSQLAndMicroHTTPD() throws {
        let loaded = try Self.loadedLibraries(Self.server)
        for library in Self.serverOnlyLibraries {
            #expect(loaded.contains { $0.hasPrefix(library) }, "fingerly-server does not load \(library): \(loaded)")
        }
    }

    @Test(arguments: [collector, library, server])
    func noProductCarriesICUData(_ path: String) throws {
        let dump = try Self.symbolsAndNeeded(path)
        #expect(!dump.contains("icudt"), "\(path) holds ICU data (an icudt symbol)")
        let loaded = try Self.loadedLibraries(path)
        let internationalization = loaded.filter { $0.contains("FoundationICU") || $0.contains("FoundationInternationalization") }
        #expect(internationalization.isEmpty, "\(path) loads \(internationalization)")
    }
}
