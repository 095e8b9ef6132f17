import FingerlyHost
import FingerlyModel

/// Sound cards, by their ALSA id.
package struct SoundProbe: Probe {
    package let id = "sound"

    package func collect(into context: ProbeContext) throws(ProbeFailure) {
        let devices: [DeviceNode]
        do {
            devices = try context.deviceInventory().devices(DeviceQuery(subsystem: "sound", attributes: ["id", "number"]))
        } catch where error.failure == .absent {
            context.emit("sound.cards", [String]())
            return
        } catch { throw ProbeFailure(error) }
        let cards = devices.filter { $0.sysname.hasPrefix("card") && $0.attributes["id"] != nil }
        context.emit("sound.cards", cards.map { "\($0.sysname) \($0.attributes["id"]!) bus=\($0.bus ?? "none")" })
    }
}
