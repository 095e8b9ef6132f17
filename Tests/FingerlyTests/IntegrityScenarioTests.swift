import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// The runtime integrity verdicts against real debuggers, tracers, hooks and instrumentation,
/// run on the built CLI.
@Suite(.serialized) struct IntegrityScenarioTests {
    static func installed(_ tool: String) -> Bool {
        ["/usr/bin/", "/bin/", "/usr/sbin/"].contains { FileManager.default.isExecutableFile(atPath: $0 + tool) }
    }

    /// The README's release build (Swift runtime linked in: valgrind 3.19 cannot run the
    /// toolchain's shared runtime).
    static let releaseCLI = TestPaths.packageRoot + "/.build/release/fingerly-identify"
    static func buildHook(_ name: String) throws -> String {
        let directory = try TestPaths.temporaryDirectory("hook")
        let library = directory + "/lib\(name).so"
        let build = try runProcess("/usr/bin/gcc", ["-shared", "-fPIC", "-O1", "-o", library,
                                                    TestPaths.packageRoot + "/Tests/Fixtures/hooks/hook-\(name).c", "-ldl"])
        try #require(build.status == 0, "gcc: \(build.standardError)")
        return library
    }

    static let run = ["--no-submit", "--json"]

    static func virtualDisplayRunning() -> Bool {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return pids.contains { pid in
            pid.allSatisfy(\.isNumber) && (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.hasPrefix("Xvfb") == true
        }
    }

    @Test func plainRunIsClean() throws {
        let found = try verdicts(in: try runCLI(Self.run))
        for name in [VerdictName.debugger, .tampering, .instrumentation] {
            let verdict = found[name]
            #expect(!verdict.value && verdict.codes.isEmpty, "\(name.rawValue): \(verdict.messages)")
        }
        let automation = found.automation
        if ProcessInfo.processInfo.environment["CI"].map({ !["false", "0", ""].contains($0.lowercased()) }) == true {
            // On CI the CI variables may show, at low confidence only.
            #expect(!automation.value || (automation.confidence == .low && automation.codes == ["ci_environment"]), "\(automation.messages)")
        } else {
            #expect(!automation.value && automation.codes.isEmpty, "\(automation.messages)")
        }
    }

    /// Untraced, the PTRACE_TRACEME child shares the collector's memory instead of copying it, and may still be
    /// traced (valgrind, which refuses a CLONE_VM child that is no vfork: HostProgramMatrixTests).
    @Test func theTracemeChildOfAnUntracedRunMayBeTraced() throws {
        let result = try runCLI(Self.run).identifyResultLine()
        let selfTest = try #require(result.report.probes.first { $0.id == "ptrace-self-test" })
        #expect(selfTest.status == .ok && selfTest.signals["debug.traceme"] == .string("allowed"), "\(selfTest.issues)")
    }

    @Test(.enabled(if: installed("gdb"), "gdb is not installed"))
    func gdbIsADebuggerWithHighConfidence() throws {
        let output = try runProcess("/usr/bin/gdb", ["-batch", "-ex", "run", "--args", TestPaths.cli] + Self.run)
        let debugger = try verdicts(in: output).debugger
        #expect(debugger.value && debugger.confidence == .high)
        #expect(debugger.codes.contains("tracer_pid") && debugger.codes.contains("parent_is_debugger"))
        #expect(debugger.messages.first { $0.contains("traced by pid") }?.contains("gdb") == true, "the tracer is named")
        #expect(debugger.codes.contains("aslr_disabled"))
    }

    @Test(.enabled(if: installed("strace"), "strace is not installed"))
    func straceFollowingForksIsADebuggerWithHighConfidence() throws {
        let output = try runProcess("/usr/bin/strace", ["-f", "-o", "/dev/null", TestPaths.cli] + Self.run)
        let debugger = try verdicts(in: output).debugger
        #expect(debugger.value && debugger.confidence == .high)
        #expect(debugger.codes.contains("tracer_pid") && debugger.codes.contains("traceme_blocked"))
        #expect(debugger.messages.first { $0.contains("traced by pid") }?.contains("strace") == true)
    }

    /// strace stopping the collector for 20 ms at every system call of every thread: nearly
    /// every probe times out. The tracer is named all the same, since it was read before any
    /// probe thread existed; the probes it starved are missing evidence, never a clean host, and
    /// starvation itself is no verdict (a busy machine starves a collector too).
    @Test(.enabled(if: installed("strace"), "strace is not installed"))
    func aCollectorStarvedByATracerIsNotReportedClean() throws {
        let output = try runProcess("/usr/bin/strace", ["-f", "-o", "/dev/null", "-e", "trace=all", "-e", "inject=all:delay_enter=20000",
                                                        TestPaths.cli] + Self.run)
        let result = try output.identifyResultLine()
        let timedOut = result.report.probes.filter { $0.status == .timeout }
        try #require(timedOut.count * 2 > result.report.probes.count, "the tracer did not starve the run: \(timedOut.count) timeouts")
        let debugger = result.verdicts[.debugger]
        #expect(debugger.value && debugger.confidence == .high, "debugger came back \(debugger.value) on a starved, traced collector")
        #expect(debugger.reasons.contains { $0.code == "early_tracer_pid" && $0.message.contains("strace") }, "\(debugger.reasons)")
        let instrumentation = result.verdicts[.instrumentation]
        // strace slows system calls, not code: no translator, and the starved probes are missing evidence.
        #expect(!instrumentation.value, "\(instrumentation.reasons)")
        #expect(instrumentation.confidence == .low, "a starved run's clean verdict must say its evidence is missing")
        let missing = Set(instrumentation.missingEvidence.map(\.probe))
        #expect(timedOut.contains { missing.contains($0.id) }, "\(missing)")
        #expect(result.suspectLevel == .medium || result.suspectLevel == .high, "suspect \(result.suspectScore) \(result.suspectLevel)")
    }

    @Test(.enabled(if: installed("ltrace"), "ltrace is not installed"))
    func ltraceIsADebugger() throws {
        // -e narrows the traced calls: with every PLT entry broken on, ltrace cannot keep up
        // with a Swift program's threads.
        let output = try runProcess("/usr/bin/ltrace", ["-e", "ptrace", "-o", "/dev/null", TestPaths.cli] + Self.run)
        let debugger = try verdicts(in: output).debugger
        #expect(debugger.value)
        #expect(debugger.codes.contains("tracer_pid"))
        #expect(debugger.messages.first { $0.contains("traced by pid") }?.contains("ltrace") == true)
    }

    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func anLDPreloadHookOnOpenIsTamperingWithHighConfidence() throws {
        let library = try Self.buildHook("open")
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = library
        let tampering = try verdicts(in: try runCLI(Self.run, environment: environment)).tampering
        #expect(tampering.value && tampering.confidence == .high)
        #expect(tampering.codes.contains("interposed_symbol") && tampering.codes.contains("ld_preload"))
        let interposition = try #require(tampering.messages.first { $0.hasPrefix("Calls do not reach") })
        #expect(interposition.contains("open -> \(library)"), "names the symbol and the library: \(interposition)")
    }

    @Test(.enabled(if: installed("gcc") && installed("unshare"), "gcc or unshare is not installed"),
          .enabled(if: geteuid() == 0, "needs root: unshare -m and mount --bind over /etc"))
    func theSameHookThroughEtcLdSoPreloadInAPrivateMountNamespace() throws {
        let library = try Self.buildHook("open")
        let scratch = try TestPaths.temporaryDirectory("preload-etc")
        // The namespace gets its own copy of /etc with the preload file; the host's /etc is untouched.
        let script = "cp -a /etc \"$1/etc\" && printf '%s\\n' \"$2\" > \"$1/etc/ld.so.preload\" && mount --bind \"$1/etc\" /etc && exec \"$3\" --no-submit --json"
        let output = try runProcess("/usr/bin/unshare", ["-m", "/bin/sh", "-c", script, "sh", scratch, library, TestPaths.cli])
        #expect(!FileManager.default.fileExists(atPath: "/etc/ld.so.preload"), "the host's /etc must not change")
        let tampering = try verdicts(in: output).tampering
        #expect(tampering.value && tampering.confidence == .high)
        #expect(tampering.codes.contains("ld_so_preload") && tampering.codes.contains("interposed_symbol"))
        #expect(tampering.messages.contains { $0.contains("/etc/ld.so.preload injects \(library)") })
    }

    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aHookThatHidesItselfIsStillCaught() throws {
        let library = try Self.buildHook("stealth")
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = library
        let tampering = try verdicts(in: try runCLI(Self.run, environment: environment)).tampering
        #expect(tampering.value && tampering.confidence == .high)
        // Its open/openat/fopen hooks are visible as interposition, and what they filter out of
        // /proc/self/maps is visible through raw system calls.
        #expect(tampering.codes.contains("interposed_symbol") && tampering.codes.contains("libc_view_mismatch"))
        #expect(tampering.messages.contains { $0.contains("fopen -> \(library)") })
        #expect(tampering.messages.contains { $0.contains("/proc/self/maps hides") && $0.contains(library) })
    }

    /// libfaketime sets this process's clock back before the host's own files: that is evidence
    /// about the clock, not a fresh install. Its preload is tampering of its own (`ld_preload`),
    /// so the clock's reason is looked for by name.
    @Test(.enabled(if: installed("faketime"), "faketime is not installed"))
    func aClockSetBackIsTamperingNotAFreshInstall() throws {
        let setBackTo = Date(timeIntervalSince1970: 1_577_836_800)  // 2020-01-01, faketime's argument below
        let filesAfterIt = ["/etc/machine-id", "/var/log/dpkg.log"].filter { path in
            ((try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate]) as? Date)
                .map { $0.timeIntervalSince(setBackTo) > 2 * 86_400 } ?? false
        }
        try #require(!filesAfterIt.isEmpty, "no file of this host is dated after 2020-01-01 for the clock to be behind")
        var environment = ProcessInfo.processInfo.environment
        environment["STATE_DIRECTORY"] = TestPaths.stateDirectory
        let output = try runProcess("/usr/bin/faketime", ["2020-01-01", TestPaths.cli] + Self.run, environment: environment)
        let result = try output.identifyResultLine()

        let tampering = result.verdicts[.tampering]
        #expect(tampering.value && tampering.codes.contains("ld_preload"), "\(tampering.codes)")
        let clock = try #require(tampering.reasons.first { $0.code == "clock_behind_files" }, "\(tampering.codes)")
        #expect(clock.confidence == .medium)
        #expect(filesAfterIt.contains { clock.message.contains($0) } && clock.message.contains("day(s) after the clock"),
                "\(clock.message)")
        let farm = result.verdicts[.farm]
        #expect(!farm.codes.contains { $0.hasPrefix("fresh_") }, "\(farm.messages)")
        let provisioning = try result.probe("provisioning")
        #expect(!provisioning.signals.keys.contains { $0.hasSuffix("_age_days") }, "\(provisioning.signals)")
    }

    @Test(.enabled(if: installed("valgrind"), "valgrind is not installed"))
    func valgrindIsInstrumentation() throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.releaseCLI),
                     "\(Self.releaseCLI) is missing: scripts/test builds it with the README's release command")
        // The README's release build as it is, debug info and all: valgrind must load it.
        // Everything runs some fifty times slower under valgrind: give the probes room.
        let output = try runProcess("/usr/bin/valgrind", ["-q", Self.releaseCLI, "--no-submit", "--json", "--tiers", "fast",
                                                          "--budget-ms", "120000", "--probe-timeout-ms", "60000"])
        #expect(!output.standardError.contains("corrupted debuginfo"), "\(output.standardError.prefix(2000))")
        let instrumentation = try verdicts(in: output).instrumentation
        #expect(instrumentation.value && instrumentation.kind == "valgrind")
        #expect(instrumentation.codes.contains("valgrind_mapped"))
    }

    /// A run-time object that rewrites the program's GOT slot for getenv: libc's code and every
    /// global lookup are untouched, so only the slot itself tells. The same host without it is clean.
    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aGOTSlotRewrittenByALoadedObjectIsTampering() throws {
        let host = try InstalledLibrary.compile(try String(contentsOfFile: TestPaths.packageRoot + "/Tests/Fixtures/hooks/got-host.c",
                                                           encoding: .utf8), name: "got-host", extraFlags: "-ldl")
        let directory = try TestPaths.temporaryDirectory("got-patch")
        let patch = directory + "/libgotpatch.so"
        let build = try runProcess("/usr/bin/gcc", ["-shared", "-fPIC", "-O1", "-o", patch,
                                                    TestPaths.packageRoot + "/Tests/Fixtures/hooks/got-patch.c"])
        try #require(build.status == 0, "gcc: \(build.standardError)")
        func tampering(_ arguments: [String]) throws -> Verdict {
            let run = try runProcess(host, arguments, environment: try InstalledLibrary.environment())
            try #require(run.status == 0, "\(run.standardError)")
            return try run.decoded(IntegrityResult.self).tampering
        }
        let clean = try tampering([])
        #expect(!clean.value, "\(clean.reasons)")
        let patched = try tampering([patch])
        #expect(patched.value && patched.confidence == .high, "\(patched.reasons)")
        let slot = try #require(patched.reasons.first { $0.code == "redirected_got_slot" }, "\(patched.reasons)")
        #expect(slot.message.contains("getenv in the GOT of [main] -> \(patch)"), "\(slot.message)")
    }

    /// A host that checks several times in one process, with `steps` between the checks (got-host-repeat.c),
    /// the patcher and the plugin built beside it; each check's tampering verdict in order.
    static func repeatedChecks(_ steps: (_ patcher: String, _ plugin: String) -> [String]) throws -> [Verdict] {
        let hooks = TestPaths.packageRoot + "/Tests/Fixtures/hooks/"
        let source = try String(contentsOfFile: hooks + "got-host-repeat.c", encoding: .utf8)
        let host = try InstalledLibrary.compile(source, name: "got-host-repeat", extraFlags: "-ldl")
        let directory = try TestPaths.temporaryDirectory("got-repeat")
        let patcher = directory + "/libgotpatchlater.so", plugin = directory + "/libgotslotowner.so"
        for (output, source) in [(patcher, "got-patch-later.c"), (plugin, "got-slot-owner.c")] {
            let build = try runProcess("/usr/bin/gcc", ["-shared", "-fPIC", "-O1", "-o", output, hooks + source])
            try #require(build.status == 0, "gcc \(source): \(build.standardError)")
        }
        let run = try runProcess(host, steps(patcher, plugin), environment: try InstalledLibrary.environment())
        try #require(run.status == 0, "\(run.standardError)")
        return try run.standardOutput.split(separator: "\n").map {
            try JSONDecoder.fingerly.decode(IntegrityResult.self, from: Data($0.utf8)).tampering
        }
    }

    static func redirectedSlotMessages(_ verdict: Verdict) -> [String] {
        verdict.reasons.filter { $0.code == "redirected_got_slot" }.map(\.message)
    }

    /// A slot rewritten after a check, with nothing loaded or unloaded since, is read again by the
    /// next check: what an earlier walk kept of the relocations never stands in for the slot itself.
    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aGOTSlotRewrittenAfterACheckIsSeenByTheNextCheck() throws {
        var patcherPath = ""
        let verdicts = try Self.repeatedChecks { patcher, _ in
            patcherPath = patcher
            return ["load", patcher, "check", "check", "redirect", "", "check"]
        }
        try #require(verdicts.count == 3)
        #expect(!verdicts[0].value && !verdicts[1].value, "\(verdicts[0].reasons) \(verdicts[1].reasons)")
        #expect(verdicts[2].value && verdicts[2].confidence == .high, "\(verdicts[2].reasons)")
        let expected = "getenv in the GOT of [main] -> \(patcherPath)"
        #expect(Self.redirectedSlotMessages(verdicts[2]).contains { $0.contains(expected) }, "\(verdicts[2].reasons)")
    }

    /// A plugin loaded after a check brings GOT slots no earlier walk saw: the next check reads them,
    /// and sees one rewritten with no further load.
    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aGOTSlotOfAnObjectLoadedAfterACheckIsSeen() throws {
        var paths = ("", "")
        let verdicts = try Self.repeatedChecks { patcher, plugin in
            paths = (patcher, plugin)
            return ["load", patcher, "check", "load", plugin, "redirect", "libgotslotowner.so", "check"]
        }
        try #require(verdicts.count == 2)
        #expect(!verdicts[0].value, "\(verdicts[0].reasons)")
        let expected = "getenv in the GOT of \(paths.1) -> \(paths.0)"
        #expect(Self.redirectedSlotMessages(verdicts[1]).contains { $0.contains(expected) }, "\(verdicts[1].reasons)")
    }

    /// A plugin unloaded after a check leaves nothing of itself in the next check, and loaded again
    /// (perhaps where it was) its slots are read afresh.
    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aGOTSlotOfAnObjectUnloadedAndLoadedAgainIsReadAfresh() throws {
        var paths = ("", "")
        let verdicts = try Self.repeatedChecks { patcher, plugin in
            paths = (patcher, plugin)
            return ["load", patcher, "load", plugin, "check", "unload", plugin, "check",
                    "load", plugin, "check", "redirect", "libgotslotowner.so", "check"]
        }
        try #require(verdicts.count == 4)
        for verdict in verdicts.prefix(3) { #expect(!verdict.value, "\(verdict.reasons)") }
        let expected = "getenv in the GOT of \(paths.1) -> \(paths.0)"
        #expect(Self.redirectedSlotMessages(verdicts[3]).contains { $0.contains(expected) }, "\(verdicts[3].reasons)")
    }

    /// A run-time object rewrites this library's own pointers to dlopen so that every look-up of a
    /// loaded library fails: the walk of this library's relocations, which asks the loader nothing,
    /// names the rewrite, and the failed look-up of libc is tampering in its own right.
    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func thisLibrarysOwnRewrittenDlopenIsTampering() throws {
        let host = try InstalledLibrary.compile(try String(contentsOfFile: TestPaths.packageRoot + "/Tests/Fixtures/hooks/got-host.c",
                                                           encoding: .utf8), name: "got-host-library", extraFlags: "-ldl")
        let patch = try TestPaths.temporaryDirectory("got-patch-library") + "/libblind.so"
        let build = try runProcess("/usr/bin/gcc", ["-shared", "-fPIC", "-O1", "-o", patch,
                                                    TestPaths.packageRoot + "/Tests/Fixtures/hooks/got-patch-library.c"])
        try #require(build.status == 0, "gcc: \(build.standardError)")
        let run = try runProcess(host, [patch], environment: try InstalledLibrary.environment())
        try #require(run.status == 0, "\(run.standardError)")
        let tampering = try run.decoded(IntegrityResult.self).tampering
        #expect(tampering.value && tampering.confidence == .high, "\(tampering.reasons)")
        #expect(tampering.reasons.contains { $0.code == "libc_lookup_failed" }, "\(tampering.reasons)")
        let slot = try #require(tampering.reasons.first { $0.code == "redirected_got_slot" }, "\(tampering.reasons)")
        #expect(slot.message.contains("dlopen in the GOT of") && slot.message.contains("libfingerly") && slot.message.contains(patch),
                "\(slot.message)")
    }

    /// An extension module with its own bundled TLS library (as wheels ship OpenSSL): its SSL_write
    /// slot leads into its own dependency, which is no rewrite.
    @Test(.enabled(if: installed("gcc"), "gcc is not installed"))
    func aModulesBundledLibraryIsNoRedirection() throws {
        let host = try InstalledLibrary.compile(try String(contentsOfFile: TestPaths.packageRoot + "/Tests/Fixtures/hooks/got-host.c",
                                                           encoding: .utf8), name: "got-host-bundled", extraFlags: "-ldl")
        let directory = try TestPaths.temporaryDirectory("bundled-tls")
        let hooks = TestPaths.packageRoot + "/Tests/Fixtures/hooks/"
        for (arguments, what) in [(["-shared", "-fPIC", "-O1", "-Wl,-soname,libprivatessl.so.1", "-o", directory + "/libprivatessl.so.1",
                                    hooks + "private-tls.c"], "the bundled library"),
                                   (["-shared", "-fPIC", "-O1", "-o", directory + "/_module.so", hooks + "private-tls-user.c",
                                     "-L" + directory, "-l:libprivatessl.so.1", "-Wl,-rpath," + directory], "the module")] {
            let build = try runProcess("/usr/bin/gcc", arguments)
            try #require(build.status == 0, "gcc, \(what): \(build.standardError)")
        }
        let run = try runProcess(host, [directory + "/_module.so"], environment: try InstalledLibrary.environment())
        try #require(run.status == 0, "\(run.standardError)")
        let tampering = try run.decoded(IntegrityResult.self).tampering
        #expect(!tampering.reasons.contains { $0.code == "redirected_got_slot" }, "\(tampering.reasons)")
        #expect(!tampering.value, "\(tampering.reasons)")
    }

    #if arch(x86_64)
    static let isX86_64 = true
    #else
    static let isX86_64 = false
    #endif

    /// QEMU user mode maps nothing of its own into the guest and sets no variable: only the cost of
    /// translating code new to the process gives it away.
    @Test(.enabled(if: installed("qemu-x86_64"), "qemu-user is not installed"),
          .enabled(if: Self.isX86_64, "runs this machine's x86_64 build under qemu-x86_64"))
    func qemuUserModeIsSeenByItsTranslationSlowdownAlone() throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.releaseCLI),
                     "\(Self.releaseCLI) is missing: scripts/test builds it with the README's release command")
        let output = try runProcess("/usr/bin/qemu-x86_64", [Self.releaseCLI, "--no-submit", "--json", "--budget-ms", "20000"])
        let result = try output.identifyResultLine()
        let instrumentation = result.verdicts[.instrumentation]
        #expect(instrumentation.value && instrumentation.confidence >= .medium, "\(instrumentation.reasons)")
        #expect(instrumentation.reasons.contains { $0.code == "code_translation_slowdown" }, "\(instrumentation.reasons)")
        guard case .int(let factor)? = try result.report.probe("collector").signals["collector.code_slowdown_factor"] else {
            Issue.record("no collector.code_slowdown_factor"); return
        }
        #expect(factor > CodeSlowdown.instrumentedFactor)
        // Timeouts grew with the slowdown: every probe had the time it needed.
        #expect(result.report.probes.allSatisfy { $0.status != .timeout }, "\(result.report.probes.filter { $0.status == .timeout }.map(\.id))")
    }

    @Test(.enabled(if: installed("xvfb-run"), "xvfb-run is not installed"))
    func xvfbRunIsAutomationEvidence() throws {
        let output = try runProcess("/usr/bin/xvfb-run", ["-a", TestPaths.cli] + Self.run)
        // xvfb-run stops its Xvfb on the way out, but not always before returning: wait, so
        // that later live tests do not see a virtual display that belongs to this one.
        for _ in 0..<100 where Self.virtualDisplayRunning() { usleep(50_000) }
        let automation = try verdicts(in: output).automation
        #expect(automation.value && automation.kind == "virtual-display")
        #expect(automation.codes.contains("xvfb_run"))
    }
}
