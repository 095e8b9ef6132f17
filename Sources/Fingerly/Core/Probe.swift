/// One source of signals. Adding a probe means one new file with a type conforming to this,
/// one entry in `probes/catalogue.json`, and one line in `ProbeRegistry.builtIn`.
///
/// `collect` runs on a thread of its own and may block: the scheduler abandons it when it
/// overruns its timeout or the run's budget.
protocol Probe: Sendable {
    var id: String { get }
    func collect(into context: ProbeContext) throws(ProbeFailure)
}

/// A probe giving up as a whole, with the status to record.
struct ProbeFailure: Error {
    let status: ProbeStatus
    let detail: String

    init(_ status: ProbeStatus, _ detail: String) {
        self.status = status
        self.detail = detail
    }

    init(_ error: HostReadError) {
        self.init(ProbeStatus(error.failure), error.description)
    }
}

/// The probes Fingerly ships, in the order they are listed in the catalogue.
enum ProbeRegistry {
    static let builtIn: [any Probe] = [
        OSProbe(),
        CPUProbe(),
        CPUIDProbe(),
        MemoryProbe(),
        MachineIdentityProbe(),
        DMIProbe(),
        ProcessContextProbe(),
        LoaderEnvironmentProbe(),
        ProxyEnvironmentProbe(),
        ContainerMarkersProbe(),
        ASLRProbe(),
        BreakpointsProbe(),
        SymbolInterpositionProbe(),
        LoadedObjectsProbe(),
        ProcessMapsProbe(),
        ThreadNamesProbe(),
        AutomationEnvironmentProbe(),
        PCIProbe(),
        USBProbe(),
        BlockProbe(),
        NetworkInterfacesProbe(),
        InputDevicesProbe(),
        DisplayProbe(),
        SoundProbe(),
        TPMProbe(),
        HypervisorMarkersProbe(),
        ContainerRuntimeProbe(),
        ProvisioningProbe(),
        FilesystemIdentityProbe(),
        ProxyConfigurationProbe(),
        TrustStoreProbe(),
        TLSPinCheckProbe(),
        PtraceSelfTestProbe(),
        LibcViewProbe(),
        CodeIntegrityProbe(),
        ListeningSocketsProbe(),
        ProcessScanProbe(),
        CollectorProbe(),
    ]
}
