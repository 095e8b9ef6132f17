import FingerlyIdentifyCommand
#if canImport(Glibc)
import Glibc
#endif

exit(await FingerlyIdentify.main())
