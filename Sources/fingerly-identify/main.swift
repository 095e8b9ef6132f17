import FingerlyIdentifyCommand
#if canImport(Glibc)
import Glibc
#endif

exit(FingerlyIdentify.main())
