#ifndef FINGERLY_SHIMS_H
#define FINGERLY_SHIMS_H

#include <stdbool.h>
#include <stdint.h>

/// Registers returned by one CPUID leaf.
typedef struct {
    uint32_t eax, ebx, ecx, edx;
} fingerly_cpuid_registers;

/// Runs CPUID for `leaf`/`subleaf`. Returns false on architectures without CPUID.
bool fingerly_cpuid(uint32_t leaf, uint32_t subleaf, fingerly_cpuid_registers *out);


/// The burned-in MAC of a network interface (ETHTOOL_GPERMADDR), even after the address was
/// changed or randomised. Writes 6 bytes; returns 0, or -1 when the driver does not say.
int fingerly_permanent_mac(const char *interface, unsigned char *out);


#include <stddef.h>
#include <sys/types.h>

/// Forks a child that calls PTRACE_TRACEME and exits at once, so this process is never left
/// traced. Returns 0 when the child could become traced, the child's errno when it could not
/// (EPERM: something already traces it, e.g. `strace -f`), or -1 with errno when fork failed.
int fingerly_traceme_selftest(void);

/// Reads up to `capacity` bytes of a file with raw system calls (inline `syscall`, no libc
/// wrapper), so an LD_PRELOAD hook on open/read/fopen cannot filter what comes back.
/// Returns the byte count, or -errno.
ssize_t fingerly_raw_read_file(const char *path, char *buffer, size_t capacity);

/// The address of the dynamic loader's debugger hook (`_r_debug.r_brk`), where gdb plants a breakpoint.
const void *fingerly_loader_breakpoint_address(void);

/// The entry of a C function of this library, to check for planted breakpoints.
const void *fingerly_shim_entry(void);

/// Describes every loaded object as lines "O\t<path>\t<soname>" followed by its "N\t<needed>"
/// lines (DT_NEEDED), from dl_iterate_phdr. Returns the length written (truncated to capacity).
size_t fingerly_loaded_objects(char *buffer, size_t capacity);

/// Resolves `symbol` twice: through the global scope (RTLD_DEFAULT, what calls really reach)
/// and inside `library` (dlopen with RTLD_NOLOAD). Writes the objects defining each into the
/// path buffers. Returns 1 when both are the same address, 0 when they differ, -1 when the
/// library is not loaded or does not define the symbol.
int fingerly_symbol_origin(const char *symbol, const char *library, const void **global_address,
                           char *global_path, size_t global_capacity, char *library_path, size_t library_capacity);

/// Compares the first `count` bytes of the code at `address` in memory with the same bytes in
/// the ELF file it was loaded from. Writes both, and the file's path. Returns 1 when equal,
/// 0 when different, -1 when the file cannot be read or the address is not in a file mapping.
int fingerly_compare_code_with_file(const void *address, unsigned char *memory, unsigned char *disk, size_t count,
                                    char *path, size_t path_capacity);


/// The SHA-256 fingerprint (hex) of every certificate in PEM text, one a line, without parsing them.
size_t fingerly_certificate_fingerprints(const char *pem, size_t length, char *buffer, size_t capacity);

/// Scans trusted certificates in PEM text against the packaged fingerprints (newline-separated
/// hex): "L\t" + a description line for each certificate not shipped, "I\t<fingerprint>" when
/// such a certificate copies a shipped one's subject with another key, and "P\t<count>" of the
/// shipped ones. Shipped certificates are hashed, not parsed.
size_t fingerly_scan_trusted_certificates(const char *pem, size_t length, const char *packaged_fingerprints,
                                          char *buffer, size_t capacity);

/// What fingerly_tls_pin_check found.
enum fingerly_pin_outcome {
    /// A chain of verified signatures runs from the leaf, valid for the host, up to a pinned key.
    FINGERLY_PIN_CONFIRMED = 0,
    /// The handshake completed but no verified path leads from the leaf to a pinned key.
    FINGERLY_PIN_MISMATCH = 1,
    /// The path to a pinned key holds, but the leaf is not for this host or a certificate is out of date.
    FINGERLY_PIN_NOT_VALID = 2,
    FINGERLY_PIN_NO_CONNECTION = -1,
    FINGERLY_PIN_PROXY_REFUSED = -2,
    FINGERLY_PIN_HANDSHAKE_FAILED = -3,
    FINGERLY_PIN_NO_CERTIFICATE = -4,
    FINGERLY_PIN_TIMED_OUT = -5,
    /// Nothing was sent: the host or port is not valid, or the CONNECT request does not fit.
    FINGERLY_PIN_INVALID_REQUEST = -6,
    FINGERLY_PIN_NO_ADDRESS = -7,
    /// The verification itself could not run (out of memory).
    FINGERLY_PIN_VERIFICATION_FAILED = -8,
};

/// Opens TLS to host:port (an RFC 3986 host; an IPv6 literal in brackets), through an HTTP CONNECT
/// proxy when proxy_host is given, and checks the presented chain against `pins` (SPKI SHA-256,
/// base64, one a line). Connecting, resolving, the proxy exchange and the handshake all end within
/// timeout_ms; the socket and TLS state are freed on every path. Describes the presented chain in
/// `chain`, one line per certificate, "sha256-fingerprint\tSPKI-sha256-base64\tsubject\tissuer"
/// (RFC 2253 names), and says why in `detail`. Returns a fingerly_pin_outcome.
int fingerly_tls_pin_check(const char *host, const char *port, const char *proxy_host, const char *proxy_port,
                           const char *pins, int timeout_ms, char *chain, size_t chain_capacity,
                           char *detail, size_t detail_capacity);

#endif
