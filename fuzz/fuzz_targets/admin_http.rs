#![no_main]

#[global_allocator]
static ALLOC: warden_fuzz::CountingAlloc = warden_fuzz::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_fuzz::admin_http(data));
