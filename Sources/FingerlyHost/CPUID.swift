import CFingerlyCPUID

/// The registers one CPUID leaf returns.
package struct CPUIDRegisters: Sendable, Hashable {
    package let eax: UInt32
    package let ebx: UInt32
    package let ecx: UInt32
    package let edx: UInt32

    package init(eax: UInt32, ebx: UInt32, ecx: UInt32, edx: UInt32) {
        (self.eax, self.ebx, self.ecx, self.edx) = (eax, ebx, ecx, edx)
    }
}

package enum CPUID {
    /// Runs CPUID on the CPU this thread is on; nil on an architecture without the instruction.
    package static func query(leaf: UInt32, subleaf: UInt32 = 0) -> CPUIDRegisters? {
        var registers = fingerly_cpuid_registers()
        guard fingerly_cpuid(leaf, subleaf, &registers) else { return nil }
        return CPUIDRegisters(eax: registers.eax, ebx: registers.ebx, ecx: registers.ecx, edx: registers.edx)
    }
}
