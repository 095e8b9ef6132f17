#ifndef FINGERLY_CURL_H
#define FINGERLY_CURL_H

// curl_easy_setopt and curl_easy_getinfo are variadic: Swift cannot call them. These take one
// type each. Filled in by the transport work.

#endif
