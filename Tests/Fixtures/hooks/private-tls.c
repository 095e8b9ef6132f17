// A library of its own that exports SSL_write, as a Python wheel bundles its own OpenSSL under
// another soname (libssl-1b2c3d4e.so.1.1).
int SSL_write(void *connection, const void *bytes, int count) {
    (void)connection;
    (void)bytes;
    return count;
}
