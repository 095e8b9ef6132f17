#ifndef FINGERLY_SSL_LOADER_H
#define FINGERLY_SSL_LOADER_H

// Why libssl could not be used (it is opened on the first TLS call, ssl_loader.c), or NULL once it is.
const char *fingerly_ssl_problem(void);

#endif
