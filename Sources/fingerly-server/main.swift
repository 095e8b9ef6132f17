import FingerlyServer

#if canImport(Glibc)
import Glibc
#endif

exit(await FingerlyServerCommand.main())
