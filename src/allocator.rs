//! The process's allocator, named once for every binary that runs
//! librdkafka as walrelay runs it: the walrelay command, and the bench that
//! measures a bare producer beside it (benches/relay/bare.rs).

/// Makes jemalloc the allocator of the binary it is expanded in, with
/// walrelay's options; nothing without the `jemalloc` feature.
///
/// jemalloc for the whole process: built unprefixed, it is also the
/// `malloc` that librdkafka's C code calls. Each record is allocated on the
/// apply loop's thread and freed on the delivery-report thread, which
/// glibc's arenas serve slowly; with jemalloc a drain costs a sixth to a
/// third less CPU per event (docs/benchmarks.md, issue 21).
///
/// Its options are read before its first allocation; MALLOC_CONF overrides
/// them. Freed pages go back to the system over about 1 s rather than 10
/// (as it next allocates: there is no background thread): a drain of 8 KB
/// events peaked at 54-67 MiB rather than up to 87 (glibc: 56-58), at no
/// CPU cost measured. Two arenas, not jemalloc's four per core: walrelay
/// allocates on few threads (the apply loop, librdkafka's broker threads and
/// its report thread), and each arena a thread starts keeps partly used
/// slabs of its own; at rest that was about 0.5 MiB of anonymous memory, and no
/// drain or steady rate cost more CPU with two (docs/benchmarks.md). Linux
/// only in effect: where tikv-jemalloc-sys builds jemalloc prefixed
/// (macOS), it reads `_rjem_malloc_conf` and ignores this.
///
/// A macro, not items of this library: a global allocator and an exported
/// `malloc_conf` belong to the binary, and a test linking the library keeps
/// glibc's malloc.
#[macro_export]
macro_rules! process_allocator {
    () => {
        #[cfg(feature = "jemalloc")]
        #[global_allocator]
        static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

        #[cfg(feature = "jemalloc")]
        #[export_name = "malloc_conf"]
        static MALLOC_CONF: &[u8; 30] = b"dirty_decay_ms:1000,narenas:2\0";
    };
}
