// Checks the integrity verdicts several times in one process, loading, unloading and rewriting
// between the checks as its arguments say, and prints each check's result on a line of its own:
//   load PATH, unload PATH, redirect OBJECT (through got_patch_later_redirect), check.
#include <dlfcn.h>
#include <fingerly.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (getenv("FINGERLY_GOT_HOST_NEVER_SET")) return 3;
    fingerly *handle;
    fingerly_error error;
    if (fingerly_load("{}", &handle, &error) != 0) {
        fprintf(stderr, "fingerly: %s\n", error.message);
        return 1;
    }
    void *opened[8] = {0};
    size_t opened_count = 0;
    void (*redirect)(const char *) = NULL;
    for (int index = 1; index < argc; index++) {
        const char *step = argv[index], *operand = index + 1 < argc ? argv[index + 1] : "";
        if (strcmp(step, "check") == 0) {
            char *result = NULL;
            if (fingerly_check_integrity(handle, 0, &result, &error) != 0) {
                fprintf(stderr, "fingerly: %s\n", error.message);
                return 1;
            }
            puts(result);
            fingerly_free(result);
            continue;
        }
        index++;
        if (strcmp(step, "load") == 0) {
            void *library = dlopen(operand, RTLD_NOW);
            if (!library || opened_count == sizeof opened / sizeof *opened) {
                fprintf(stderr, "dlopen: %s\n", dlerror());
                return 2;
            }
            opened[opened_count++] = library;
            if (!redirect) redirect = (void (*)(const char *))dlsym(library, "got_patch_later_redirect");
        } else if (strcmp(step, "unload") == 0) {
            void *library = dlopen(operand, RTLD_NOW | RTLD_NOLOAD);
            if (!library) return 2;
            dlclose(library);
            for (size_t known = 0; known < opened_count; known++) {
                if (opened[known] == library) {
                    dlclose(library);
                    opened[known] = NULL;
                }
            }
        } else if (strcmp(step, "redirect") == 0) {
            if (!redirect) return 2;
            redirect(operand);
        } else {
            fprintf(stderr, "unknown step %s\n", step);
            return 2;
        }
    }
    fingerly_close(handle);
    return 0;
}
