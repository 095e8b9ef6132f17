import FingerlyHost
import FingerlyModel

/// One source of signals. Adding a probe means one new file with a type conforming to this,
/// one entry in `probes/catalogue.json`, and one line anywhere in `ProbeRegistry.builtIn`.
///
/// `collect` runs on a thread of its own and may block: the scheduler abandons it when it
/// overruns its timeout or the run's budget.
package protocol Probe: Sendable {
    var id: String { get }
    func collect(into context: ProbeContext) throws(ProbeFailure)
}

/// A probe giving up as a whole, with the status to record.
package struct ProbeFailure: Error {
    package let status: ProbeStatus
    package let detail: String

    /// The detail of a probe whose thread could not be started: the collector's own starvation
    /// check counts these beside timeouts.
    package static let threadStartFailure = "could not start a thread for the probe"

    init(_ status: ProbeStatus, _ detail: String) {
        self.status = status
        self.detail = detail
    }

    init(_ error: HostReadError) {
        self.init(ProbeStatus(error.failure), error.description)
    }
}

/// The probes Fingerly ships. The catalogue decides which run and in what order the report
/// lists them; each catalogue entry finds its probe here by id, so this list has no order.
package enum ProbeRegistry {
    package static let builtIn: [any Probe] = [
        ASLRProbe(),
        AutomationEnvironmentProbe(),
        BlockProbe(),
        BreakpointsProbe(),
        CPUIDProbe(),
        CPUProbe(),
        CodeIntegrityProbe(),
        CollectorProbe(),
        ContainerMarkersProbe(),
        ContainerRuntimeProbe(),
        DMIProbe(),
        DisplayProbe(),
        FilesystemIdentityProbe(),
        HypervisorMarkersProbe(),
        InputDevicesProbe(),
        LibcViewProbe(),
        ListeningSocketsProbe(),
        LoadedObjectsProbe(),
        LoaderEnvironmentProbe(),
        MachineIdentityProbe(),
        MemoryProbe(),
        NetworkInterfacesProbe(),
        OSProbe(),
        PCIProbe(),
        ProcessContextProbe(),
        ProcessMapsProbe(),
        ProcessScanProbe(),
        ProvisioningProbe(),
        ProxyConfigurationProbe(),
        ProxyEnvironmentProbe(),
        PtraceSelfTestProbe(),
        SoundProbe(),
        SymbolInterpositionProbe(),
        TLSPinCheckProbe(),
        TPMProbe(),
        ThreadNamesProbe(),
        TrustStoreProbe(),
        USBProbe(),
        VMExitTimingProbe(),
    ]

    /// The built-in probes by id.
    package static let byId: [String: any Probe] = Dictionary(builtIn.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
}

extension ProbeStatus {
    package init(_ failure: HostReadFailure) {
        switch failure {
        case .absent: self = .absent
        case .denied: self = .denied
        case .malformed: self = .malformed
        case .error: self = .error
        }
    }
}
