import FingerlyHost
import FingerlyModel

/// Whether a TPM is present, and which major version.
package struct TPMProbe: Probe {
    package let id = "tpm"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "tpm", attributes: ["tpm_version_major"]))
        } catch where error.failure == .absent {
            devices = []
        } catch { throw ProbeFailure(error) }
        let chips = devices.filter { $0.sysname.hasPrefix("tpm") && !$0.sysname.hasPrefix("tpmrm") }
        context.emit("tpm.present", !chips.isEmpty)
        if let version = chips.first?.attributes["tpm_version_major"].flatMap({ Int($0) }) {
            context.emit("tpm.version", version)
        }
    }
}
