import Foundation
import Testing

/// docs/detection.md's parity table: every technique VMAware registers on Linux, each covered with a fixture that
/// exists or rejected with a reason.
@Suite struct DetectionParityTests {
    /// VMAware's technique table (`src/vmaware.hpp`) as a Linux build registers it.
    static let vmAwareLinuxTechniques: Set<String> = [
        "FIRMWARE", "DEVICES", "SYSTEM_REGISTERS", "AZURE", "BOOT_LOGO", "DISK_SERIAL", "SMBIOS_VM_BIT", "KMSG", "CVENDOR",
        "QEMU_FW_CFG", "SYSTEMD", "CTYPE", "DOCKERENV", "DMIDECODE", "DMESG", "HWMON", "LINUX_USER_HOST", "VMWARE_IOMEM",
        "VMWARE_IOPORTS", "VMWARE_SCSI", "VMWARE_DMESG", "QEMU_VIRTUAL_DMI", "QEMU_USB", "HYPERVISOR_DIR", "UML_CPU",
        "VBOX_MODULE", "SYSINFO_PROC", "DMI_SCAN", "PODMAN_FILE", "WSL_PROC", "FILE_ACCESS_HISTORY", "MAC", "CONTAINER_PID",
        "BLUESTACKS_FOLDERS", "AMD_SEV_MSR", "TEMPERATURE", "CGROUP", "PROCESSES", "THREAD_COUNT", "TIMER",
        "THREAD_MISMATCH", "VMID", "CPU_BRAND", "CPUID_SIGNATURE", "HYPERVISOR_STR", "HYPERVISOR_BIT", "BOCHS_CPU",
        "KGT_SIGNATURE",
    ]

    struct Row {
        let technique: String
        let verdict: String
        let evidence: String
    }

    static func rows() throws -> [Row] {
        let document = try String(contentsOfFile: TestPaths.packageRoot + "/docs/detection.md", encoding: .utf8)
        let section = try #require(document.components(separatedBy: "## Parity with VMAware").last)
        return section.split(separator: "\n").compactMap { line -> Row? in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 6, cells[1] != "technique", !cells[1].hasPrefix("---") else { return nil }
            return Row(technique: cells[1], verdict: cells[3], evidence: cells[4])
        }
    }

    /// Names in backticks that are fixture directories: `name` under environments/, `hosts/name` under hosts/.
    static func fixtures(in text: String) -> [String] {
        let fixturesRoot = TestPaths.packageRoot + "/Tests/Fixtures/"
        return text.components(separatedBy: "`").enumerated().compactMap { index, part in
            guard index % 2 == 1 else { return nil }
            let path = part.hasPrefix("hosts/") ? fixturesRoot + part : fixturesRoot + "environments/" + part
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
                && !part.isEmpty && !part.contains("..") ? part : nil
        }
    }

    @Test func everyVMAwareLinuxTechniqueHasOneRow() throws {
        let rows = try Self.rows()
        #expect(rows.count == Self.vmAwareLinuxTechniques.count)
        #expect(Set(rows.map(\.technique)) == Self.vmAwareLinuxTechniques)
    }

    @Test func eachRowIsCoveredByAFixtureOrRejectedWithAReason() throws {
        for row in try Self.rows() {
            if row.verdict.hasPrefix("covered") {
                #expect(!Self.fixtures(in: row.evidence).isEmpty, "\(row.technique) names no fixture that exists: \(row.evidence)")
            } else {
                #expect(row.verdict.hasPrefix("rejected"), "\(row.technique): \(row.verdict)")
                #expect(row.evidence.split(separator: " ").count >= 5, "\(row.technique) gives no reason: \(row.evidence)")
            }
            // A host fixture named anywhere must exist.
            for part in row.evidence.components(separatedBy: "`").enumerated().filter({ $0.offset % 2 == 1 }).map(\.element)
            where part.hasPrefix("hosts/") {
                #expect(FileManager.default.fileExists(atPath: TestPaths.packageRoot + "/Tests/Fixtures/" + part), "\(part)")
            }
        }
    }

    @Test func theCountsTheDocumentStatesAreTheTables() throws {
        let rows = try Self.rows()
        let covered = rows.filter { $0.verdict.hasPrefix("covered") }.count
        let document = try String(contentsOfFile: TestPaths.packageRoot + "/docs/detection.md", encoding: .utf8)
        #expect(document.contains("\(covered) covered, \(rows.count - covered) rejected"))
        // The floor: at least 44 of the 48 decided one way or the other.
        #expect(rows.filter { $0.verdict.hasPrefix("covered") || $0.verdict.hasPrefix("rejected") }.count >= 44)
    }
}
