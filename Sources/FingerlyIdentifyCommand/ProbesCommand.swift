import Fingerly
import FingerlyCatalogue
import FoundationEssentials
import FingerlyModel
import FingerlyPolicy
import FingerlyProbes

/// `fingerly-identify probes [--json]`: the probe catalogue, exactly as compiled in.
struct ProbesCommand {
    static let flags: Set<String> = ["json", "help"]

    let json: Bool

    func run(_ io: CommandIO) -> ExitCode {
        let catalogue = ProbeCatalogue.embedded
        if json {
            do {
                io.standardOutput(String(decoding: try JSONEncoder.fingerly.encode(catalogue), as: UTF8.self) + "\n")
            } catch {
                io.standardError("fingerly-identify: cannot encode the catalogue: \(error)\n")
                return .software
            }
            return .success
        }
        var text = ""
        for probe in catalogue.probes {
            text += "\(probe.id)  [\(probe.tier.rawValue), timeout \(probe.timeoutMs.map { "\($0) ms" } ?? "default")]\n"
            text += "  \(probe.description)\n"
            text += "  reads: \(probe.reads.joined(separator: ", "))\n"
            if !probe.syscalls.isEmpty { text += "  syscalls: \(probe.syscalls.joined(separator: ", "))\n" }
            for signal in probe.signals {
                text += "    \(signal.name) (\(signal.type), \(signal.class.rawValue), \(signal.stability))\(signal.class == .identifier ? " hashed" : ""): \(signal.description)\n"
            }
            for note in probe.falsePositiveNotes ?? [] { text += "  false positives: \(note)\n" }
            text += "\n"
        }
        io.standardOutput(text)
        return .success
    }
}
