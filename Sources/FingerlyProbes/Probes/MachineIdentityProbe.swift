import FingerlyHost
import FingerlyModel

/// The OS installation's machine-id and the firmware's UUID and serials, all hashed.
package struct MachineIdentityProbe: Probe {
    package let id = "machine-identity"

    static let dmiIdentifiers = [
        ("product_serial", "machine.dmi_product_serial"),
        ("board_serial", "machine.dmi_board_serial"),
        ("chassis_serial", "machine.dmi_chassis_serial"),
    ]

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let host = context.host
        var machineId: String?
        if context.wants("machine.machine_id") || context.wants("machine.machine_id_state"),
           let text = context.attempt({ () throws(HostReadError) in try host.readAttribute("/etc/machine-id") }) {
            let state = Self.machineIdState(text)
            context.emit("machine.machine_id_state", state)
            if state == "valid" {
                machineId = text
                context.emitIdentifier("machine.machine_id", raw: text)
                // Compared here, in the clear, so only the answer leaves the probe.
                context.emit("machine.machine_id_shared", context.tables.strings("sharedMachineIds").contains(text))
                context.contribute(.instance, "machine-id", raw: text, worldReadable: true, signal: "machine.machine_id")
            }
        }
        if context.wants("machine.dbus_machine_id"),
           let text = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/var/lib/dbus/machine-id") }),
           Self.machineIdState(text) == "valid" {
            context.emitIdentifier("machine.dbus_machine_id", raw: text)
            if let machineId { context.emit("machine.dbus_machine_id_matches", machineId == text) }
        }

        // product_uuid and the serials are mode 0400: expect `denied` when not root.
        if context.wants("machine.dmi_product_uuid") || context.wants("machine.dmi_product_uuid_state"),
           let uuid = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/sys/class/dmi/id/product_uuid") }) {
            let state = Self.uuidState(uuid, placeholders: context.tables.strings("placeholderUUIDs"))
            context.emit("machine.dmi_product_uuid_state", state)
            if state == "valid" {
                if let machineId {
                    context.emit("machine.machine_id_equals_dmi_uuid", machineId == uuid.lowercased().replacing("-", with: ""))
                }
                context.emitIdentifier("machine.dmi_product_uuid", raw: uuid)
                // The kernel serves product_uuid and the serials as 0400: root-only evidence.
                context.contribute(.hardware, "dmi-uuid", raw: uuid, worldReadable: false, signal: "machine.dmi_product_uuid")
            }
        }
        for (file, signal) in Self.dmiIdentifiers where context.wants(signal) {
            guard let serial = context.attemptIfPresent({ () throws(HostReadError) in try host.readAttribute("/sys/class/dmi/id/" + file) }),
                  !Self.isPlaceholderSerial(serial, context.tables.strings("placeholderSerials")) else { continue }
            context.emitIdentifier(signal, raw: serial)
            context.contribute(.hardware, "dmi-" + file.replacing("_", with: "-"), raw: serial, worldReadable: false, signal: signal)
        }
    }

    /// machine-id(5): 32 lower-case hex digits; "uninitialized" during first boot.
    static func machineIdState(_ text: String) -> String {
        if text.isEmpty { return "empty" }
        if text == "uninitialized" { return "uninitialized" }
        let hex = text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
        return text.utf8.count == 32 && hex ? "valid" : "malformed"
    }

    static func uuidState(_ text: String, placeholders: [String]) -> String {
        let lowered = text.lowercased()
        if placeholders.contains(lowered) { return "placeholder" }
        let groups = lowered.split(separator: "-", omittingEmptySubsequences: false)
        let wellFormed = groups.map(\.count) == [8, 4, 4, 4, 12]
            && groups.allSatisfy { $0.allSatisfy(\.isHexDigit) }
        return wellFormed ? "valid" : "malformed"
    }

    static func isPlaceholderSerial(_ serial: String, _ placeholders: [String]) -> Bool {
        let lowered = serial.lowercased()
        return lowered.isEmpty || placeholders.contains(lowered) || lowered.allSatisfy { $0 == "0" || $0 == " " }
    }
}
