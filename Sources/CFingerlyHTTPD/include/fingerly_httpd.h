#ifndef FINGERLY_HTTPD_H
#define FINGERLY_HTTPD_H

// MHD_start_daemon is variadic: Swift cannot call it. Filled in by the server work.

#endif
