import Foundation
import Testing
@testable import Fingerly
@testable import FingerlyHost
@testable import FingerlyModel
@testable import FingerlyPolicy
@testable import FingerlyProbes

/// Every rule of the shipped policy, fired by the evidence it is written for.
@Suite struct DefaultPolicyTests {
    /// rule id -> (verdict, signals that must fire it, kind expected when it is the deciding rule)
    static let cases: [String: (VerdictName, [String: SignalValue], String?)] = [
        "dmi_names_microvm": (.virtualization, ["dmi.virtualization_kind": .string("cloud-hypervisor"), "dmi.sys_vendor": .string("Cloud Hypervisor")], "cloud-hypervisor"),
        "cpuid_hypervisor_vendor": (.virtualization, ["cpu.hypervisor_vendor": .string("KVMKVMKVM"),
                                                      "cpu.hypervisor_kind": .string("kvm")], "kvm"),
        "cpuid_xen_vendor": (.virtualization, ["cpu.hypervisor_vendor": .string("XenVMMXenVMM"),
                                               "cpu.hypervisor_kind": .string("xen"),
                                               "virt.xen_dom0": .bool(false)], "xen"),
        "cpuid_unknown_hypervisor_vendor": (.virtualization, ["cpu.hypervisor_vendor": .string("NewHvVendor1")],
                                            "NewHvVendor1"),
        "acpi_names_microvm": (.virtualization, ["virt.acpi_kind": .string("firecracker"), "virt.acpi_oem_ids": .strings(["FIRECK"])], "firecracker"),
        "platform_names_hypervisor": (.virtualization, ["virt.platform_kind": .string("zvm")], "zvm"),
        "devicetree_names_hypervisor": (.virtualization, ["virt.devicetree_kind": .string("lkvm")], "lkvm"),
        "xen_guest_interfaces": (.virtualization, ["virt.xen_guest": .bool(true)], "xen"),
        "acpi_names_hypervisor": (.virtualization, ["virt.acpi_kind": .string("virtualbox"), "virt.acpi_oem_ids": .strings(["VBOX"])], "virtualbox"),
        "vm_generation_counter": (.virtualization, ["virt.vm_generation_counter": .bool(true)], nil),
        "paravirtual_bus": (.virtualization, ["virt.bus_kind": .string("hyperv")], "hyperv"),
        "guest_drivers": (.virtualization, ["virt.guest_driver_kind": .string("vmware"), "virt.guest_drivers": .strings(["vmw_balloon"])], "vmware"),
        "hypervisor_clocksource": (.virtualization, ["virt.clocksource_kind": .string("kvm")], "kvm"),
        "virtual_pci_vendor": (.virtualization, ["pci.vendor_ids": .strings(["8086", "15ad"])], nil),
        "smbios_vm_bit": (.virtualization, ["dmi.smbios_vm_bit": .bool(true)], nil),
        "hyperv_enlightened_qemu": (.virtualization, ["cpu.hypervisor_kind": .string("hyperv"),
                                                      "cpu.hypervisor_vendor": .string("Microsoft Hv"),
                                                      "dmi.virtualization_kind": .string("qemu")], "qemu"),
        // Hidden hypervisors: the rules that only corroborate are given the medium evidence they stand beside.
        "hypervisor_hidden": (.virtualization, ["cpu.hypervisor_bit": .bool(false), "cpu.hypervisor_vendor_is_xen": .bool(false),
                                                "virt.xen_guest": .bool(false), "virt.acpi_id_kind": .string("qemu")], "qemu"),
        "dmi_vendor_before_paravirtual_cpuid": (.virtualization, ["dmi.virtualization_kind": .string("virtualbox"),
                                                                  "cpu.hypervisor_kind": .string("kvm"),
                                                                  "cpu.hypervisor_vendor": .string("KVMKVMKVM")], "virtualbox"),
        "xen_interfaces_behind_hyperv_cpuid": (.virtualization, ["cpu.hypervisor_kind": .string("hyperv"),
                                                                 "cpu.hypervisor_vendor": .string("Microsoft Hv"),
                                                                 "virt.xen_guest": .bool(true)], "xen"),
        "cpuid_vendor_behind_clear_bit": (.virtualization, ["cpu.hypervisor_hidden": .bool(true), "cpu.hypervisor_kind": .string("kvm"),
                                                            "cpu.hypervisor_vendor_is_xen": .bool(false),
                                                            "cpu.hypervisor_leaves": .strings(["0x40000000 KVMKVMKVM"])], "kvm"),
        "acpi_ids_name_hypervisor": (.virtualization, ["virt.acpi_id_kind": .string("qemu"), "virt.acpi_table_ids": .strings(["CBX3"]),
                                                       "virt.acpi_creator_ids": .strings(["BXPC"])], "qemu"),
        "qemu_fw_cfg": (.virtualization, ["virt.qemu_fw_cfg": .bool(true)], "qemu"),
        "virtual_pci_device": (.virtualization, ["pci.virtual_device_kind": .string("qemu"), "pci.virtual_devices": .strings(["1234:1111"])], "qemu"),
        "virtual_disk_model": (.virtualization, ["block.virtual_disk_kind": .string("vmware")], "vmware"),
        "emulated_disk_serial": (.virtualization, ["block.emulated_disk_serial_kind": .string("qemu"),
                                                   "block.virtual_disk_kind": .string("qemu")], "qemu"),
        "virtual_nic_vendor": (.virtualization, ["net.nic_vendor_classes": .strings(["qemu"]), "block.virtual_disk_kind": .string("qemu")], "qemu"),
        "virtual_usb_device": (.virtualization, ["usb.virtual_device_kind": .string("qemu"), "block.virtual_disk_kind": .string("qemu")], "qemu"),
        "cpuid_exit_timing": (.virtualization, ["timing.cpuid_exit_suspected": .bool(true), "timing.cpuid_median_ticks": .int(9152),
                                                "timing.cpuid_to_baseline_ratio": .int(58), "block.virtual_disk_kind": .string("vmware")], "vmware"),
        "pid1_container_variable": (.container, ["container.pid1_container_variable": .string("lxc")], "lxc"),
        "container_platform": (.container, ["container.platform_kind": .string("illumos-lx")], "illumos-lx"),
        "sandbox": (.container, ["container.sandbox_kind": .string("flatpak")], "flatpak"),
        "cgroup_names_manager": (.container, ["container.cgroup_kinds": .strings(["kubernetes"])], "kubernetes"),
        "user_namespace": (.container, ["container.user_namespace": .bool(true), "container.setgroups_denied": .bool(true)], "user-namespace"),
        "pid_namespace": (.container, ["container.pid_namespace": .bool(true)], "namespace"),
        "namespace_init": (.container, ["container.namespace_init": .bool(true)], "namespace"),
        "cgroup_namespace": (.container, ["container.cgroup_namespace": .bool(true)], "namespace"),
        "overlay_root": (.container, ["container.overlay_root": .bool(true)], nil),
        "wsl_environment": (.container, ["container.wsl_environment": .bool(true)], "wsl"),
        "dmi_vendor_names_hypervisor": (.virtualization, ["dmi.virtualization_kind": .string("vmware")], "vmware"),
        "cloud_strings_without_cpuid": (.virtualization, ["dmi.unconfirmed_virtualization_kind": .string("kvm"),
                                                          "dmi.sys_vendor": .string("Alibaba Cloud")], "kvm"),
        "cpuid_hypervisor_bit": (.virtualization, ["cpu.hypervisor_bit": .bool(true),
                                                   "cpu.hypervisor_vendor_is_xen": .bool(false)], nil),
        "cpuinfo_hypervisor_flag": (.virtualization, ["cpu.hypervisor_flag": .bool(true),
                                                      "cpu.hypervisor_vendor_is_xen": .bool(false)], nil),
        "cpuinfo_hypervisor_flag_not_dom0": (.virtualization, ["cpu.hypervisor_flag": .bool(true),
                                                               "virt.xen_dom0": .bool(false)], nil),
        "container_marker_file": (.container, ["container.markers": .strings(["/run/.containerenv"]), "container.marker_kind": .string("podman")], "podman"),
        "wsl_kernel": (.container, ["os.kernel_release": .string("5.15.153.1-microsoft-standard-WSL2")], "wsl2"),
        "wsl1_kernel": (.container, ["os.kernel_release": .string("4.4.0-19041-Microsoft")], "wsl"),
        "tracer_pid": (.debugger, ["process.tracer_pid": .int(77)], nil),
        "parent_is_debugger": (.debugger, ["process.parent_comm": .string("strace")], "strace"),
        "instrumentation_preload": (.instrumentation, ["loader.ld_preload": .string("/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so")], nil),
        "instrumentation_preloaded_object": (.instrumentation,
                                             ["loader.preloaded_objects": .strings(["/usr/libexec/valgrind/vgpreload_core-amd64-linux.so"])], nil),
        "ld_so_preload": (.tampering, ["loader.preload_file_entries": .strings(["/lib/x.so"])], nil),
        "ld_so_preload_oversized": (.tampering, ["loader.preload_file_oversized": .bool(true)], nil),
        "trust_file_oversized": (.mitm, ["tls.oversized_trust_files": .strings(["/etc/ssl/certs/ca-certificates.crt"])], nil),
        "ld_audit": (.tampering, ["loader.ld_audit": .string("/tmp/audit.so")], nil),
        "ld_preload": (.tampering, ["loader.ld_preload": .string("/tmp/hook.so")], nil),
        "pin_mismatch": (.mitm, ["tls.pin_mismatches": .strings(["example.org:443 presented 'CN=example.org' issued by 'CN=Evil'"])], nil),
        "pin_unconfirmed": (.mitm, ["tls.pin_unconfirmed": .strings(["example.org:443: could not confirm the pin: the TLS handshake failed"])], nil),
        "impersonating_root": (.mitm, ["tls.impersonating_roots": .strings(["CN=ISRG Root X1 (a packaged root's name with a different key)"])], nil),
        "interception_tool_ca": (.mitm, ["tls.interception_cas": .strings(["mitmproxy (interception tool): CN=mitmproxy"]), "tls.interception_product": .string("mitmproxy")], "mitmproxy"),
        "corporate_inspection_ca": (.mitm, ["tls.interception_cas": .strings(["Zscaler (corporate TLS inspection): CN=Zscaler Root CA"]), "tls.interception_product": .string("Zscaler")], "Zscaler"),
        "keylog_file": (.mitm, ["tls.env.sslkeylogfile": .string("/tmp/keys.log")], nil),
        "locally_added_root": (.mitm, ["tls.local_roots": .strings(["CN=Custom CA (the bundle only)"])], nil),
        "firefox_policy_certificates": (.mitm, ["tls.firefox_policy_certificates": .int(2)], nil),
        "rhel_anchors": (.mitm, ["tls.rhel_anchors": .int(1)], nil),
        "etc_environment_proxy": (.proxy, ["proxy.etc_environment": .strings(["https_proxy=http://proxy:3128"])], nil),
        "desktop_proxy": (.proxy, ["proxy.desktop": .strings(["KDE: manual proxy http://proxy:3128"])], nil),
        "apt_proxy": (.proxy, ["proxy.apt": .strings(["Acquire::http::Proxy http://proxy:3142"])], nil),
        "tunnel_interface": (.proxy, ["proxy.tunnel_interfaces": .strings(["wg0"]), "proxy.apt": .strings(["Acquire::http::Proxy http://proxy:3142"])], nil),
        "node_tls_verification_disabled": (.mitm, ["tls.env_verification_disabled": .bool(true)], nil),
        "trust_store_override": (.mitm, ["tls.env_trust_overrides": .strings(["SSL_CERT_FILE"])], nil),
        "proxy_environment": (.proxy, ["proxy.env_variables": .strings(["https_proxy"]), "proxy.env.https_proxy": .string("http://127.0.0.1:8080")], nil),
        "traceme_blocked": (.debugger, ["debug.traceme": .string("blocked"), "process.seccomp_mode": .int(0)], nil),
        "traceme_blocked_under_seccomp": (.debugger, ["debug.traceme": .string("blocked"), "process.seccomp_mode": .int(2), "debug.aslr_disabled": .bool(true)], nil),
        "aslr_disabled": (.debugger, ["debug.aslr_disabled": .bool(true)], nil),
        "software_breakpoint": (.debugger, ["debug.breakpoints": .strings(["fingerly_collect_entry"])], nil),
        "code_breakpoint": (.debugger, ["integrity.code_breakpoints": .strings(["open in /lib/libc.so.6"]), "process.tracer_pid": .int(9)], nil),
        "rr_recording": (.debugger, ["process.mapped_tool_markers": .strings(["rr: /usr/lib/rr/librrpreload.so"])], "rr"),
        "valgrind_mapped": (.instrumentation, ["process.mapped_tool_markers": .strings(["valgrind: /usr/libexec/valgrind/vgpreload_core-amd64-linux.so"])], "valgrind"),
        "frida_mapped": (.instrumentation, ["process.mapped_tool_markers": .strings(["frida: /tmp/frida-agent-64.so"])], "frida"),
        "dynamorio_mapped": (.instrumentation, ["process.mapped_tool_markers": .strings(["dynamorio: /opt/dr/lib64/release/libdynamorio.so"])], "dynamorio"),
        "pin_mapped": (.instrumentation, ["process.mapped_tool_markers": .strings(["intel-pin: /opt/pin/intel64/bin/pinbin"])], "intel-pin"),
        "sanitizer_mapped": (.instrumentation, ["process.mapped_tool_markers": .strings(["asan: /usr/lib/x86_64-linux-gnu/libasan.so.8"])], "sanitizer"),
        "frida_threads": (.instrumentation, ["process.thread_names": .strings(["gum-js-loop", "main"])], "frida"),
        "glib_threads": (.instrumentation, ["process.thread_names": .strings(["pool-frida", "gmain", "gdbus"])], "frida"),
        "executable_memfd": (.instrumentation, ["process.executable_memfd_mappings": .strings(["/memfd:jit (deleted)"])], nil),
        "instrumentation_port": (.instrumentation, ["net.instrumentation_listeners": .strings(["27042 (frida-server)"])], nil),
        "uprobe_patched_text": (.instrumentation, ["integrity.code_breakpoints": .strings(["read in /lib/libc.so.6"]), "process.tracer_pid": .int(0)], nil),
        "interposed_symbol": (.tampering, ["loader.interposed_symbols": .strings(["open -> /tmp/libhook.so"])], nil),
        "libc_lookup_failed": (.tampering, ["loader.libc_lookup_failed": .bool(true)], nil),
        "redirected_got_slot": (.tampering, ["loader.redirected_got_slots": .strings(["getenv in the GOT of [main] -> /tmp/inject.so"])], nil),
        "inline_hook": (.tampering, ["integrity.inline_hooks": .strings(["open in /lib/libc.so.6: jmp rel32 trampoline"])], nil),
        "libc_view_mismatch": (.tampering, ["integrity.view_mismatches": .strings(["/proc/self/maps hides /tmp/libhook.so"])], nil),
        "object_mapped_without_loader": (.tampering, ["loader.objects_mapped_without_loader": .strings(["/dev/shm/x.so"])], nil),
        "duplicate_soname": (.tampering, ["loader.duplicate_sonames": .strings(["libsqlite3.so.0: /tmp/x/libsqlite3.so.0, /lib/libsqlite3.so.0"])], nil),
        "preloaded_object": (.tampering, ["loader.preloaded_objects": .strings(["/tmp/libhook.so"])], nil),
        // A place is a clue only beside stronger evidence.
        "runtime_object_in_unusual_place": (.tampering, ["loader.runtime_objects_in_unusual_places": .strings(["temporary: /tmp/x.so"]),
                                                         "integrity.inline_hooks": .strings(["open in /lib/libc.so.6: short jmp"])], nil),
        "clock_behind_files": (.tampering, ["provision.clock_behind_files":
            .strings(["/etc/machine-id is dated 1431 day(s) after the clock"])], nil),
        "ci_environment": (.automation, ["automation.ci_markers": .strings(["GITHUB_ACTIONS (GitHub Actions)"])], "ci"),
        "xvfb_run": (.automation, ["automation.xvfb_run": .bool(true), "automation.display": .string(":99")], "virtual-display"),
        "virtual_display_process": (.automation, ["automation.virtual_display_processes": .strings(["Xvfb (pid 12)"])], "virtual-display"),
        "virtual_input_device": (.automation, ["input.virtual_devices": .strings(["py-evdev-uinput"])], "virtual-input"),
        "uinput_holder": (.automation, ["automation.uinput_holders": .strings(["ydotoold (pid 7)"])], "virtual-input"),
        "input_injector": (.automation, ["automation.input_injector_processes": .strings(["xdotool (pid 8)"])], "virtual-input"),
        "no_session": (.automation, ["process.stdin_tty": .bool(false), "automation.login_session": .bool(false), "automation.xvfb_run": .bool(true)], "virtual-display"),
        "machine_id_shared_value": (.farm, ["machine.machine_id_shared": .bool(true)], nil),
        "machine_id_equals_dmi_uuid": (.farm, ["machine.machine_id_equals_dmi_uuid": .bool(true)], nil),
        "fresh_machine_id": (.farm, ["provision.machine_id_age_days": .int(0)], nil),
        "fresh_ssh_host_keys": (.farm, ["provision.ssh_host_key_age_days": .int(1)], nil),
        "fresh_root_filesystem": (.farm, ["provision.root_birth_age_days": .int(0)], nil),
        "fresh_package_log": (.farm, ["provision.package_log_age_days": .int(0)], nil),
        "cloud_init_instance": (.farm, ["provision.cloud_init": .bool(true), "machine.machine_id_shared": .bool(true)], nil),
        "vm_generation_counter_hint": (.farm, ["virt.vm_generation_counter": .bool(true), "machine.machine_id_equals_dmi_uuid": .bool(true)], nil),
        "machine_id_not_initialised": (.farm, ["machine.machine_id_state": .string("uninitialized")], nil),
        "machine_id_malformed": (.farm, ["machine.machine_id_state": .string("malformed")], nil),
        "dmi_uuid_placeholder": (.farm, ["machine.dmi_product_uuid_state": .string("placeholder")], nil),
        "early_tracer_pid": (.debugger, ["collector.early_tracer_pid": .int(42), "collector.early_tracer_comm": .string("strace")], nil),
        "code_translation_slowdown": (.instrumentation, ["collector.code_slowdown_factor": .int(20)], nil),
        // Past the higher bound both slowdown rules fire.
        "code_translation_slowdown_severe": (.instrumentation, ["collector.code_slowdown_factor": .int(140)], nil),
    ]

    @Test func everyShippedRuleHasACase() {
        let policy = Policy.embedded()
        let shipped = VerdictName.allCases.flatMap { name in (policy.verdicts[name]?.rules ?? []).map(\.id) }
        #expect(Set(shipped) == Set(Self.cases.keys))
    }

    @Test(arguments: cases.keys.sorted())
    func ruleFiresOnItsEvidence(_ id: String) throws {
        let (verdictName, signals, kind) = try #require(Self.cases[id])
        let verdicts = evaluate(.embedded(), signals, probe: "t")
        let verdict = try #require(verdicts[verdictName])
        #expect(verdict.value)
        #expect(verdict.reasons.map(\.code).contains(id), "\(verdict.reasons)")
        #expect(verdict.kind == kind)
        #expect(verdict.reasons.allSatisfy { !$0.message.contains("{") }, "unfilled placeholder")
        // Evidence for one verdict fires no other, except that an instrumentation runtime
        // injected with LD_PRELOAD is a preload too.
        let expectedAlso: Set<VerdictName> = switch id {
        case "instrumentation_preload", "instrumentation_preloaded_object": [.tampering]
        // int3 in memory with no tracer is both a breakpoint and a uprobe's mark.
        case "uprobe_patched_text": [.debugger]
        // The generation counter is a VM device as well as a clone hint.
        case "vm_generation_counter_hint": [.virtualization]
        case "code_breakpoint": []
        default: []
        }
        for (other, otherVerdict) in verdicts where other != verdictName {
            if expectedAlso.contains(other) {
                #expect(otherVerdict.value, "\(id) should also fire \(other)")
                continue
            }
            #expect(!otherVerdict.value, "\(id) also fired \(other)")
        }
    }
}
