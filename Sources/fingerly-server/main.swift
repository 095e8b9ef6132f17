import FingerlyServer

#if canImport(Glibc)
import Glibc
#endif

exit(FingerlyServerCommand.main())
