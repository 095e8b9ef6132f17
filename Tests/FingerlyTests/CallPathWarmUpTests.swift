import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyModel
@testable import FingerlyProbes

/// The load runs a call's path once so that a tracer's per-call cost is not paid inside the first
/// identify's budget (see `Fingerly.warmUpCallPath`). It runs before consent is asked for: it must
/// read nothing of the host and keep nothing.
@Suite struct CallPathWarmUpTests {
    @Test func theWarmUpReadsNothingOfTheHostEvenWithoutConsent() throws {
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, consent: .denied)
        let report = fingerly.warmUpCallPath()
        #expect(report.root == Fingerly.warmUpRoot)
        let probed = report.probes.filter { $0.id != CollectorProbe.probeId }
        #expect(probed.count == 1, "one probe runs: \(probed.map(\.id))")
        for entry in probed {
            #expect(entry.signals.isEmpty, "\(entry.id) read \(entry.signals.keys.sorted()) of the host")
            #expect(entry.identityComponents.isEmpty, "\(entry.id) derived identity components")
        }
        #expect(report.identity.instanceId == nil && report.identity.hardwareId == nil)
        // A key of its own: nothing in it could be matched with a real report's identifiers.
        #expect(report.identifierKeying == .perRun)
    }

    @Test func theWarmUpLeavesTheStateDirectoryUntouched() throws {
        let directory = try TestPaths.temporaryDirectory("warm-up-state")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory)
        let fingerly = try Fingerly.loadBlocking(apiKey: nil, consent: .granted,
                                                 options: FingerlyOptions(stateDirectory: directory))
        fingerly.warmUpCallPath()
        let written = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(written.isEmpty, "the warm-up wrote \(written) into the state directory")
    }
}
