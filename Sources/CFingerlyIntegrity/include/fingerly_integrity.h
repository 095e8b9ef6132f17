#ifndef FINGERLY_INTEGRITY_H
#define FINGERLY_INTEGRITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// Starts a child that calls PTRACE_TRACEME and exits at once, so this process is never left
/// traced. Returns 0 when the child could become traced, the child's errno when it could not
/// (EPERM: something already traces it, e.g. `strace -f`), or -1 with errno when no child could be started.
int fingerly_traceme_selftest(void);

/// Reads up to `capacity` bytes of a file with raw system calls (inline `syscall`, no libc
/// wrapper), so an LD_PRELOAD hook on open/read/fopen cannot filter what comes back.
/// Returns the byte count, or -errno.
ssize_t fingerly_raw_read_file(const char *path, char *buffer, size_t capacity);

/// The address of the dynamic loader's debugger hook (`_r_debug.r_brk`), where gdb plants a breakpoint.
const void *fingerly_loader_breakpoint_address(void);

/// The entry of a C function of this library (fingerly_raw_read_file), to check for planted breakpoints.
const void *fingerly_shim_entry(void);

/// Sizes of the text fields below, NUL included. A longer text is cut there and flagged.
enum {
    FINGERLY_OBJECT_PATH_SIZE = 4096,
    FINGERLY_OBJECT_NAME_SIZE = 256,
};

/// One object the dynamic loader has mapped, from dl_iterate_phdr.
typedef struct {
    /// As the loader names it; "[main]" for the program itself.
    char path[FINGERLY_OBJECT_PATH_SIZE];
    bool path_truncated;
    /// DT_SONAME; empty without one.
    char soname[FINGERLY_OBJECT_NAME_SIZE];
    bool soname_truncated;
    /// The vDSO or the dynamic loader, told by the addresses the kernel gave (AT_SYSINFO_EHDR,
    /// AT_BASE), never by a name an object could take.
    bool is_loader_infrastructure;
    /// Where the object's segments start: how other listings name the object.
    uintptr_t range_start;
} fingerly_loaded_object;

/// One DT_NEEDED entry of a loaded object.
typedef struct {
    /// The object's position in the loader's list, which is its index in the objects array
    /// when that array had room for it.
    size_t object_index;
    char name[FINGERLY_OBJECT_NAME_SIZE];
    bool name_truncated;
} fingerly_needed_library;

/// How much of the loader's list fitted the caller's arrays.
typedef struct {
    size_t object_count;
    /// Objects the loader listed, written or not.
    size_t objects_found;
    /// objects_found > object_count: the objects array was too small.
    bool objects_cut;
    size_t needed_count;
    size_t needed_found;
    bool needed_cut;
} fingerly_loaded_objects_report;

/// Describes every loaded object into `objects` and every DT_NEEDED entry into `needed`, as far
/// as each array has room; `report` says how far that was. Entries past a count are not written.
void fingerly_loaded_objects(fingerly_loaded_object *objects, size_t object_capacity,
                             fingerly_needed_library *needed, size_t needed_capacity,
                             fingerly_loaded_objects_report *report);

/// Resolves `symbol` twice: through the global scope (RTLD_DEFAULT, what calls really reach)
/// and inside `library` (dlopen with RTLD_NOLOAD). Writes the objects defining each into the
/// path buffers (cut to fit, NUL-terminated). Returns 1 when both are the same address, 2 when
/// the program itself defines the symbol, 0 when another object does, -1 when the library is not
/// loaded or does not define the symbol.
int fingerly_symbol_origin(const char *symbol, const char *library, const void **global_address,
                           char *global_path, size_t global_capacity, char *library_path, size_t library_capacity);

/// Compares the first `count` bytes of the code at `address` in memory with the same bytes in
/// the ELF file it was loaded from. Writes both, and the file's path (cut to fit). Returns 1
/// when equal, 0 when different, -1 when the file cannot be read or the address is not in a
/// file mapping.
int fingerly_compare_code_with_file(const void *address, unsigned char *memory, unsigned char *disk, size_t count,
                                    char *path, size_t path_capacity);

/// The text fields of the structs above, as a pointer and a length up to the NUL. Swift reads
/// them through these rather than through the imported `char[N]` tuples: naming a tuple of 4096
/// elements makes the Swift runtime build its type metadata on first use, which cost more than
/// the whole listing.
size_t fingerly_loaded_object_path(const fingerly_loaded_object *object, const char **text);
size_t fingerly_loaded_object_soname(const fingerly_loaded_object *object, const char **text);
size_t fingerly_needed_library_name(const fingerly_needed_library *needed, const char **text);

/// Rounds of the arithmetic chain fingerly_measure_code_cost runs as its reference.
#define FINGERLY_CHAIN_ROUNDS 20000u

/// What running code new to this thread cost against running a loop it has run before.
typedef struct {
    /// CPU time (CLOCK_THREAD_CPUTIME_ID) of 1,024 data-dependent branches, each its own block.
    int64_t blocks_cpu_ns;
    /// CPU time of FINGERLY_CHAIN_ROUNDS dependent multiply-adds in one loop: twice the cheaper of
    /// two halves, one run before the branches and one after.
    int64_t chain_cpu_ns;
    /// Wall-clock time of both.
    int64_t wall_ns;
    int64_t cpu_clock_resolution_ns;
    /// What the work computed, so that no compiler may leave it out.
    uint64_t result;
} fingerly_code_cost;

/// Runs both workloads in the calling thread, `seed` choosing the branches' paths. Returns 0,
/// or -1 when a clock cannot be read.
int fingerly_measure_code_cost(uint64_t seed, fingerly_code_cost *cost);

/// A GOT slot of a loaded object for a watched symbol that sends calls somewhere else than the
/// object itself (a lazy slot not yet bound), the library that defines the symbol, or wherever
/// a global lookup of the symbol lands (an interposer, which fingerly_symbol_origin names).
enum {
    /// Paths in a redirected slot are cut here: a reason names them, and a check that allocates
    /// page-sized records on every call costs more than the walk itself.
    FINGERLY_SLOT_PATH_SIZE = 1024,
    FINGERLY_SLOT_SYMBOL_SIZE = 64,
};
typedef struct {
    char symbol[FINGERLY_SLOT_SYMBOL_SIZE];
    /// The object whose GOT holds the slot ("" for the main program: the caller names it).
    char object[FINGERLY_SLOT_PATH_SIZE];
    /// The object the slot points into; "" for memory no object was loaded from.
    char target[FINGERLY_SLOT_PATH_SIZE];
    const void *target_address;
    /// Where the owner's and the target's segments start (0: the target is in no loaded object):
    /// how the objects are known to fingerly_loaded_objects' `range_start`.
    uintptr_t owner_start, target_start;
} fingerly_redirected_slot;

/// Walks the PLT and GLOB_DAT relocations of every loaded object (x86-64 and AArch64) for the
/// newline-separated `symbols`, which `library` (a soname, already loaded) defines. Writes up to
/// `capacity` redirected slots and returns how many were found (possibly more than written), or
/// -1 when the library is not loaded, -2 on an architecture whose relocations are not read, -3 when
/// more than 1,024 objects are loaded (a target past them could not be placed: nothing is judged).
long fingerly_redirected_slots(const char *symbols, const char *library, fingerly_redirected_slot *slots,
                               size_t capacity);
/// The slots of the object holding this code, for every symbol, whose target is neither in that
/// object nor in one of the `accepted` objects (by range start) nor where a global lookup of the
/// symbol lands. Returns how many were found, -1 when this code's object is not listed, -2 as above.
long fingerly_redirected_own_slots(const uintptr_t *accepted, size_t accepted_count, fingerly_redirected_slot *slots,
                                   size_t capacity);
/// Where the segments of the object holding this code start (fingerly_loaded_object's range_start).
uintptr_t fingerly_own_object_start(void);
size_t fingerly_redirected_slot_symbol(const fingerly_redirected_slot *slot, const char **text);
size_t fingerly_redirected_slot_object(const fingerly_redirected_slot *slot, const char **text);
size_t fingerly_redirected_slot_target(const fingerly_redirected_slot *slot, const char **text);

/// `symbol` inside `library` (a soname already loaded), found through the loader's functions as
/// they were when this object was loaded; NULL when the library is not loaded or lacks it.
const void *fingerly_lookup_in_library(const char *library, const char *symbol);
/// Whether `library` (a soname) is loaded, asked the same way.
bool fingerly_library_is_loaded(const char *library);

#endif
