import Testing

/// scripts/install gives users stripped files; gdb must still reach their symbols through the
/// .gnu_debuglink to .debug/NAME.debug next to each, and must not once that file is gone.
@Suite(.serialized) struct InstalledBinariesStrippedTests {
    static func install() throws -> String {
        let destdir = try TestPaths.temporaryDirectory("stripped-install")
        let install = try runProcess(TestPaths.packageRoot + "/scripts/install",
                                     ["--prefix", "/usr/local", "--destdir", destdir,
                                      "--build-dir", TestPaths.packageRoot + "/.build/debug"])
        try #require(install.status == 0, "scripts/install: \(install.standardError)")
        return destdir + "/usr/local"
    }

    @Test func installedFilesHoldNoSymbolsOrDwarfButADebugLink() throws {
        let root = try Self.install()
        for file in ["bin/fingerly-identify", "bin/fingerly-server", "lib/libfingerly.so.0"] {
            let sections = try runProcess("/usr/bin/readelf", ["-S", "-W", root + "/" + file])
            try #require(sections.status == 0, "readelf \(file): \(sections.standardError)")
            #expect(!sections.standardOutput.contains(".symtab"), "\(file) keeps its symbol table")
            #expect(!sections.standardOutput.contains(".debug_info"), "\(file) keeps DWARF")
            #expect(sections.standardOutput.contains(".gnu_debuglink"), "\(file) has no debug link")
        }
    }

    @Test func gdbFindsTheSymbolsThroughTheDebugLinkAndNotWithoutIt() throws {
        let root = try Self.install()
        let library = root + "/lib/libfingerly.so.0"
        let cli = root + "/bin/fingerly-identify"
        func gdb(_ command: String, _ file: String) throws -> String {
            // gdb prints "No symbol" as an error, on standard error.
            let run = try runProcess("/usr/bin/gdb", ["-batch", "-nx", "-ex", command, file])
            return run.standardOutput + run.standardError
        }
        // A C shim's function, local to the library: the dynamic symbol table, which stays, never has it.
        // The library's debug file holds symbols without DWARF (scripts/install says why).
        #expect(try gdb("info address fingerly_certificate_pin", library).contains("Symbol \"fingerly_certificate_pin\" is at"))
        #expect(try gdb("info address main", cli).contains("Symbol \"main\" is"))

        for directory in [root + "/lib/.debug", root + "/bin/.debug"] {
            let moved = try runProcess("/bin/mv", [directory, directory + "-moved"])
            try #require(moved.status == 0, "mv \(directory): \(moved.standardError)")
        }
        #expect(try gdb("info address fingerly_certificate_pin", library).contains("No symbol"))
        #expect(!(try gdb("info address main", cli).contains("Symbol \"main\" is")))
    }
}
