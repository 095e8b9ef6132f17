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
        // No probe of the catalogue runs; the warm-up's own does, and reports nothing.
        let probed = report.probes.filter { $0.id != CollectorProbe.probeId }
        #expect(probed.map(\.id) == ["warm-up"], "\(probed.map(\.id))")
        #expect(probed.allSatisfy { $0.status == .ok && $0.signals.isEmpty && $0.identityComponents.isEmpty })
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
