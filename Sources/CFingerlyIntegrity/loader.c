#define _GNU_SOURCE
#include "fingerly_integrity.h"
#include "loader_functions.h"
#include "object_path.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>

const void *fingerly_loader_breakpoint_address(void) {
    return (const void *)_r_debug.r_brk;
}

/// Where the arrays stand while dl_iterate_phdr walks the loader's list.
struct listing {
    fingerly_loaded_object *objects;
    size_t object_capacity;
    fingerly_needed_library *needed;
    size_t needed_capacity;
    fingerly_loaded_objects_report *report;
};

static int list_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct listing *listing = data;
    fingerly_loaded_objects_report *report = listing->report;
    const char *strings;
    const ElfW(Dyn) *dynamic = fingerly_object_dynamic(info, &strings);
    const char *soname = fingerly_object_soname(info);
    size_t object_index = report->objects_found++;
    if (object_index < listing->object_capacity) {
        fingerly_loaded_object *object = &listing->objects[object_index];
        const char *path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "[main]";
        object->path_truncated = fingerly_copy_text(object->path, sizeof object->path, path);
        object->soname_truncated = fingerly_copy_text(object->soname, sizeof object->soname, soname);
        unsigned long vdso = getauxval(AT_SYSINFO_EHDR), loader = getauxval(AT_BASE);
        object->is_loader_infrastructure = (vdso && info->dlpi_addr == vdso) || (loader && info->dlpi_addr == loader);
        object->range_start = UINTPTR_MAX;
        for (int index = 0; index < info->dlpi_phnum; index++) {
            const ElfW(Phdr) *segment = &info->dlpi_phdr[index];
            if (segment->p_type == PT_LOAD && info->dlpi_addr + segment->p_vaddr < object->range_start) {
                object->range_start = info->dlpi_addr + segment->p_vaddr;
            }
        }
        report->object_count = object_index + 1;
    } else {
        report->objects_cut = true;
    }
    for (const ElfW(Dyn) *entry = dynamic; dynamic && strings && entry->d_tag != DT_NULL; entry++) {
        if (entry->d_tag != DT_NEEDED) continue;
        size_t needed_index = report->needed_found++;
        if (needed_index >= listing->needed_capacity) {
            report->needed_cut = true;
            continue;
        }
        fingerly_needed_library *needed = &listing->needed[needed_index];
        needed->object_index = object_index;
        needed->name_truncated = fingerly_copy_text(needed->name, sizeof needed->name, strings + entry->d_un.d_val);
        report->needed_count = needed_index + 1;
    }
    return 0;
}

void fingerly_loaded_objects(fingerly_loaded_object *objects, size_t object_capacity,
                             fingerly_needed_library *needed, size_t needed_capacity,
                             fingerly_loaded_objects_report *report) {
    memset(report, 0, sizeof *report);
    struct listing listing = {objects, object_capacity, needed, needed_capacity, report};
    fingerly_loader.iterate(list_object, &listing);
}

int fingerly_symbol_origin(const char *symbol, const char *library, const void **global_address,
                           char *global_path, size_t global_capacity, char *library_path, size_t library_capacity) {
    void *handle = fingerly_open_loaded(library);
    if (!handle) return -1;
    void *inside = fingerly_loader.symbol(handle, symbol);
    void *global = fingerly_loader.symbol(RTLD_DEFAULT, symbol);
    fingerly_loader.close(handle);
    if (!inside) return -1;
    *global_address = global;
    // Nothing of the global scope defines it (a host opened the library RTLD_LOCAL, as Python's ssl
    // module does): no lookup can be sent elsewhere, so nothing is interposed.
    if (!global || global == inside) return 1;
    // The program itself may define the function (bash defines getenv): ELF lets every library's
    // call reach it, and that is the program, not something injected into it.
    struct fingerly_object defining, program;
    const void *program_headers = (const void *)getauxval(AT_PHDR);
    if (program_headers && fingerly_object_at(global, &defining) && fingerly_object_at(program_headers, &program) &&
        defining.identity == program.identity) {
        return 2;
    }
    copy_object_path(global, global_path, global_capacity);
    copy_object_path(inside, library_path, library_capacity);
    return 0;
}

size_t fingerly_loaded_object_path(const fingerly_loaded_object *object, const char **text) {
    *text = object->path;
    return strnlen(object->path, sizeof object->path);
}

size_t fingerly_loaded_object_soname(const fingerly_loaded_object *object, const char **text) {
    *text = object->soname;
    return strnlen(object->soname, sizeof object->soname);
}

size_t fingerly_needed_library_name(const fingerly_needed_library *needed, const char **text) {
    *text = needed->name;
    return strnlen(needed->name, sizeof needed->name);
}
