/* A plugin the C host of HostProgramMatrixTests dlopens: built by the test in a temporary
   directory, the place PyInstaller, JNA and cffi extract their objects to. It does nothing
   an injected library would. */
const char *plugin_name(void) { return "host-program-matrix plugin"; }
