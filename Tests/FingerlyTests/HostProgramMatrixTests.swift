import Foundation
import Glibc
import Testing
@testable import Fingerly
@testable import FingerlyModel

/// Issue 21's acceptance matrix: real programs calling the library the way applications do (Python
/// through bindings/python, a C program with its own plugins, Ruby through Fiddle) must be clean on
/// this host. The host programs' sources are in Tests/Fixtures/hosts-programs; the library is the
/// debug build scripts/install puts in a temporary prefix, as for CABITests and the Python package's
/// pytest run.
@Suite(.serialized) struct HostProgramMatrixTests {
    static let sources = TestPaths.packageRoot + "/Tests/Fixtures/hosts-programs/"
    static let python = "/usr/bin/python3"

    static func installed(_ tool: String) -> Bool { IntegrityScenarioTests.installed(tool) }

    /// What the issue asks of every clean host: no integrity verdict true.
    static let integrityVerdicts: [VerdictName] = [.debugger, .tampering, .instrumentation]

    /// Whether the CPU tells this kernel it runs under a hypervisor: the one fact about this machine the
    /// test can know without the library (this machine and CI are Firecracker guests: it does).
    static let cpuAnnouncesHypervisor: Bool = {
        guard let cpuinfo = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return false }
        return cpuinfo.split(separator: "\n").contains { line in
            line.hasPrefix("flags") && line.split(whereSeparator: { $0 == " " || $0 == "\t" }).contains("hypervisor")
        }
    }()

    /// The labelled JSON lines a host program prints, one per call ("integrity {…}", "identify {…}").
    struct HostAnswers {
        let output: ProcessOutput
        let byLabel: [String: String]

        init(_ output: ProcessOutput, program: String) throws {
            try #require(output.status == 0, "\(program) exited \(output.status): \(output.standardError.suffix(3000))")
            var lines: [String: String] = [:]
            for line in output.standardOutput.split(separator: "\n") {
                guard let space = line.firstIndex(of: " ") else { continue }
                lines[String(line[..<space])] = String(line[line.index(after: space)...])
            }
            self.output = output
            byLabel = lines
        }

        func decoded<Value: Decodable>(_ label: String, as type: Value.Type) throws -> Value {
            let printed = "\(output.standardOutput.prefix(500)) \(output.standardError.suffix(1500))"
            let text = try #require(byLabel[label], "no '\(label)' line in: \(printed)")
            return try JSONDecoder.fingerly.decode(Value.self, from: Data(text.utf8))
        }

        var integrity: IntegrityResult { get throws { try decoded("integrity", as: IntegrityResult.self) } }
        var identify: IdentifyResult { get throws { try decoded("identify", as: IdentifyResult.self) } }
    }

    static func expectNoIntegrityVerdict(_ verdict: (VerdictName) -> Verdict?, in call: String,
                                         sourceLocation: SourceLocation = #_sourceLocation) {
        for name in integrityVerdicts {
            guard let found = verdict(name) else {
                Issue.record("\(call) decided no \(name.rawValue) verdict", sourceLocation: sourceLocation)
                continue
            }
            #expect(!found.value,
                    "\(call): \(name.rawValue) true (\(found.confidence)) \(found.codes) \(found.messages)",
                    sourceLocation: sourceLocation)
        }
    }

    /// The host's clean verdicts from both calls, and virtualization as the CPU says, from the fast tier alone.
    static func expectCleanOnThisHost(_ answers: HostAnswers, program: String,
                                      sourceLocation: SourceLocation = #_sourceLocation) throws {
        let integrity = try answers.integrity
        expectNoIntegrityVerdict({ integrity[$0] }, in: "\(program) check_integrity", sourceLocation: sourceLocation)
        let identified = try answers.identify
        expectNoIntegrityVerdict({ identified.verdicts[$0] }, in: "\(program) identify", sourceLocation: sourceLocation)
        #expect(identified.report.tiers == [.fast], "\(identified.report.tiers)", sourceLocation: sourceLocation)
        let virtualization = identified.verdicts.virtualization
        if cpuAnnouncesHypervisor {
            let said = "\(virtualization.confidence), missing \(virtualization.missingEvidence.map(\.probe))"
            #expect(virtualization.value, "the CPU announces a hypervisor; \(program) said false (\(said))",
                    sourceLocation: sourceLocation)
        } else {
            #expect(!virtualization.value || virtualization.confidence == .low,
                    "no hypervisor flag, yet \(program) said \(virtualization.confidence): \(virtualization.messages)",
                    sourceLocation: sourceLocation)
        }
    }

    // MARK: Host programs

    /// bindings/python found the library through FINGERLY_LIBRARY, as the package's own pytest run does.
    static func pythonEnvironment() throws -> [String: String] {
        try InstalledLibrary.environment(["FINGERLY_LIBRARY": try InstalledLibrary.library,
                                          "PYTHONPATH": TestPaths.packageRoot + "/bindings/python/src",
                                          // No __pycache__ written into the source tree.
                                          "PYTHONDONTWRITEBYTECODE": "1"])
    }

    static func compileSharedObject(_ source: String, named name: String) throws -> String {
        let library = try TestPaths.temporaryDirectory("matrix-\(name)") + "/lib\(name).so"
        let build = try runProcess("/usr/bin/gcc", ["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", library,
                                                    sources + source])
        try #require(build.status == 0, "gcc \(source): \(build.standardError)")
        return library
    }

    /// The C host and the plugin it loads, which lives in a temporary directory of its own.
    static let cHost: Result<(program: String, plugin: String), any Error> = Result {
        let program = try InstalledLibrary.compile(try String(contentsOfFile: sources + "host.c", encoding: .utf8),
                                                   name: "matrix-host", extraFlags: "-Wall -Werror")
        return (program, try compileSharedObject("plugin.c", named: "matrix-plugin"))
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: python), "/usr/bin/python3 is not installed"))
    func pythonWithItsOwnExtensionModulesIsClean() throws {
        let run = try runProcess(Self.python, [Self.sources + "python-host.py"],
                                 environment: try Self.pythonEnvironment())
        let answers = try HostAnswers(run, program: "python3")
        try Self.expectCleanOnThisHost(answers, program: "python3")
        // The extension modules json, ssl, sqlite3, decimal and ctypes brought in were in the loader's
        // list when the library looked, loaded at run time as the library itself was.
        let modules = try answers.decoded("modules", as: [String].self)
        #expect(modules.contains { $0.contains("/_ssl.") } && modules.contains { $0.contains("/_ctypes.") },
                "\(modules)")
        let seenAtRunTime = try answers.integrity.report.signals["loader.runtime_object_count"]?.int ?? 0
        #expect(seenAtRunTime > modules.count, "\(seenAtRunTime) run-time objects for \(modules.count) modules")
    }

    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aCProgramWithItsOwnPluginAndNSSModulesIsClean() throws {
        let (program, plugin) = try Self.cHost.get()
        let run = try runProcess(program, [plugin], environment: try InstalledLibrary.environment())
        let answers = try HostAnswers(run, program: "the C host")
        try Self.expectCleanOnThisHost(answers, program: "the C host")
        // Seen, and named with its place, yet no verdict: a plugin in a temporary directory is what
        // PyInstaller, JNA and cffi hosts have every day. (libz and libsqlite3 are also libfingerly's own
        // dependencies, so their dlopen adds no object; the plugin and the NSS modules are new.)
        let unusual = try answers.integrity.report.signals["loader.runtime_objects_in_unusual_places"]?.strings ?? []
        #expect(unusual.contains("temporary: \(plugin)"), "\(unusual)")
    }

    @Test(.enabled(if: installed("ruby"), "ruby is not installed"))
    func rubyThroughFiddleIsClean() throws {
        let run = try runProcess("/usr/bin/ruby", [Self.sources + "ruby-host.rb"],
                                 environment: try InstalledLibrary.environment(
                                     ["FINGERLY_LIBRARY": try InstalledLibrary.library]))
        try Self.expectCleanOnThisHost(try HostAnswers(run, program: "ruby"), program: "ruby")
    }
}
