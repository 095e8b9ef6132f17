#ifndef FINGERLY_CURL_H
#define FINGERLY_CURL_H

#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic: Swift cannot call them. These take one
// type each, so that the value curl reads from the argument list is the type it expects.

CURLcode fingerly_curl_global_init(void);

CURLcode fingerly_curl_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode fingerly_curl_setopt_offset(CURL *handle, CURLoption option, curl_off_t value);
/// curl copies every string option it is given, so the argument need only live for the call.
CURLcode fingerly_curl_setopt_string(CURL *handle, CURLoption option, const char *value);
/// A pointer curl keeps (a header list, a callback's user data): it must outlive the transfer.
CURLcode fingerly_curl_setopt_pointer(CURL *handle, CURLoption option, void *value);
/// CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION share this signature.
CURLcode fingerly_curl_setopt_write_callback(CURL *handle, CURLoption option, curl_write_callback callback);

CURLcode fingerly_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);

#endif
