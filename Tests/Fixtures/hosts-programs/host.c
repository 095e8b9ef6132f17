/*
 * A C program that loads at run time what real applications load, then asks libfingerly.so.0
 * about itself. Built and run by Tests/FingerlyTests/HostProgramMatrixTests.swift:
 *   host PLUGIN    dlopens libz, libsqlite3 and PLUGIN (built by the test in a temporary
 *                  directory), looks users up through NSS, then prints two lines, both of the fast
 *                  tier: "integrity <IntegrityResult JSON>" and "identify <IdentifyResult JSON>".
 * Exit status: 0, or 2 when a library could not be loaded or used, 3 when NSS failed, 4 when a
 * call of the library failed (its message on stderr).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fingerly.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opens `file` and calls its `function`, which returns a string, so each object is really in use. */
static int load_and_call(const char *file, const char *function) {
    void *object = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!object) {
        fprintf(stderr, "dlopen %s: %s\n", file, dlerror());
        return 0;
    }
    const char *(*answer)(void) = (const char *(*)(void))dlsym(object, function);
    if (!answer || !answer() || !answer()[0]) {
        fprintf(stderr, "%s in %s gave no answer\n", function, file);
        return 0;
    }
    fprintf(stderr, "host: %s answers %s\n", file, answer());
    return 1;
}

static int print_result(const char *label, int rc, char *json, const fingerly_error *error) {
    if (rc != 0) {
        fprintf(stderr, "%s: rc %d, kind %d: %s\n", label, rc, error->kind, error->message);
        return 0;
    }
    printf("%s %s\n", label, json);
    fflush(stdout);
    fingerly_free(json);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN\n", argv[0]);
        return 64;
    }
    if (!load_and_call("libz.so.1", "zlibVersion") || !load_and_call("libsqlite3.so.0", "sqlite3_libversion")
        || !load_and_call(argv[1], "plugin_name")) {
        return 2;
    }
    /* glibc answers files lookups itself; a name no source knows walks every source nsswitch.conf
       lists for passwd, so the NSS modules beyond files (systemd, ldap, sss…) are dlopened too. */
    struct passwd *root = getpwnam("root");
    if (!root || root->pw_uid != 0) {
        fprintf(stderr, "getpwnam(\"root\") failed\n");
        return 3;
    }
    (void)getpwnam("fingerly-matrix-no-such-user");

    /* No stateDirectory: the library keeps its installation secret under $STATE_DIRECTORY, which
       the test points at a directory of its own. */
    fingerly *handle = NULL;
    fingerly_error error;
    memset(&error, 0, sizeof error);
    if (fingerly_load("{\"apiKey\": null, \"consent\": \"granted\"}", &handle, &error) != 0) {
        fprintf(stderr, "fingerly_load: %s\n", error.message);
        return 4;
    }
    char *json = NULL;
    int rc = fingerly_check_integrity(handle, FINGERLY_TIER_FAST, &json, &error);
    if (!print_result("integrity", rc, json, &error)) return 4;
    json = NULL;
    rc = fingerly_identify(handle, "host-program-matrix", FINGERLY_TIER_FAST, false, &json, &error);
    if (!print_result("identify", rc, json, &error)) return 4;
    fingerly_close(handle);
    return 0;
}
