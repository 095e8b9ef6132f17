#ifndef FINGERLY_CURL_H
#define FINGERLY_CURL_H

#include <curl/curl.h>

// libcurl is opened at the first send, never linked: a process that sends nothing (a dry run, the
// local mode, the integrity check) maps neither it nor the dozen libraries it needs. Only its
// header is used, for the types and constants.

/// The library opened: the soname of Debian's libcurl4 (OpenSSL flavour and the others alike).
#define FINGERLY_CURL_SONAME "libcurl.so.4"

/// Opens libcurl, resolves every function below and initializes it, once per process; later calls
/// return the first outcome. NULL when libcurl is ready; else why not, naming the library and the
/// loader's own words. The text is the process's for ever. A host that opened libcurl itself (pycurl)
/// shares the same copy: curl_global_init counts its callers, and curl_global_cleanup is never called.
const char *fingerly_curl_load(void);

// Until fingerly_curl_load succeeds, each of these fails as curl would without memory: NULL or
// CURLE_FAILED_INIT, never a call through a missing function.
CURL *fingerly_curl_easy_init(void);
void fingerly_curl_easy_cleanup(CURL *handle);
CURLcode fingerly_curl_easy_perform(CURL *handle);
/// curl's own text for a code, static; NULL before libcurl is loaded.
const char *fingerly_curl_easy_strerror(CURLcode code);
struct curl_slist *fingerly_curl_slist_append(struct curl_slist *list, const char *line);
void fingerly_curl_slist_free_all(struct curl_slist *list);

// curl_easy_setopt and curl_easy_getinfo are variadic: Swift cannot call them. These take one
// type each, so that the value curl reads from the argument list is the type it expects.
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
