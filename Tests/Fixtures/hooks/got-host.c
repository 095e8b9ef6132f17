// A program that opens the object named on its command line (as any plugin host does), calls
// getenv through its own PLT, then asks the library for the integrity verdicts.
#include <dlfcn.h>
#include <fingerly.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc > 1 && !dlopen(argv[1], RTLD_NOW)) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    if (getenv("FINGERLY_GOT_HOST_NEVER_SET")) return 3;
    fingerly *handle;
    fingerly_error error;
    char *result = NULL;
    if (fingerly_load("{}", &handle, &error) != 0 || fingerly_check_integrity(handle, 0, &result, &error) != 0) {
        fprintf(stderr, "fingerly: %s\n", error.message);
        return 1;
    }
    puts(result);
    fingerly_free(result);
    fingerly_close(handle);
    return 0;
}
