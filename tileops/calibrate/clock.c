/* The clock the cores reach under FMA load: the clock a CPU's theoretical peak must assume.
 *
 * Why: the primer's peak is cores x GHz x FMA units x lanes x 2, and the GHz that /proc/cpuinfo
 * states (the cpu MHz line, the model name's "@ 2.90GHz") is the nominal clock; under turbo the
 * cores run faster, so a peak on the stated clock is no upper bound and a correct formula can
 * read above it. A chain of dependent integer adds runs one add per cycle on every out-of-order
 * x86-64 and aarch64 core (the add's latency is one cycle), so adds per second is cycles per
 * second.
 *
 * How: `threads` OpenMP threads (the bench's thread count) each run the chain as inline
 * assembly, 64 register-register adds per block (a register operand, not an immediate, so no
 * renamer can fold the chain), while the same loop issues 48 independent FMAs per block on 8
 * accumulators at the widest vector width this build has (the vector load the FMA kernel puts
 * on the core, which can lower its clock). 48 FMAs take at most 48 cycles on a core with one
 * FMA pipe, so the chain's 64 cycles stay the critical path and the FMAs never slow it. Each
 * round is timed by the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so a round the
 * scheduler interrupts still counts only the cycles the thread ran; the threads start every
 * round together (a barrier), so all cores are busy at once, as in the bench. Each thread keeps
 * its best round after one untimed warm-up round (the clock ramps up). The chain's final value
 * is returned so the caller can check that every add ran.
 *
 * Built by tileops/calibrate/ckernels.py with the host's C compiler at first use, loaded with
 * ctypes by tileops/calibrate/clock.py.
 */
#include <omp.h>
#include <stdint.h>
#include <time.h>

#define CHAIN 64 /* adds per block: the critical path, 64 cycles */

#if defined(__x86_64__)
#define CHAIN_TEXT "x86-64 add r64, r64 (1-cycle latency)"
#define CHAIN_BLOCK(x, one) __asm__ volatile(".rept 64\n\tadd %1, %0\n\t.endr" : "+r"(x) : "r"(one))
#elif defined(__aarch64__)
#define CHAIN_TEXT "aarch64 add x, x, x (1-cycle latency)"
#define CHAIN_BLOCK(x, one) __asm__ volatile(".rept 64\n\tadd %0, %0, %1\n\t.endr" : "+r"(x) : "r"(one))
#else
#define CHAIN_TEXT ""
#endif

#if defined(__AVX512F__)
#include <immintrin.h>
#define LOAD_TEXT "AVX-512 FMA (512-bit)"
typedef __m512 vec;
#define VSET(s) _mm512_set1_ps(s)
#define VFMA(a, m, c) _mm512_fmadd_ps((a), (m), (c))
static float first(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__AVX__) && defined(__FMA__)
#include <immintrin.h>
#define LOAD_TEXT "AVX2 FMA (256-bit)"
typedef __m256 vec;
#define VSET(s) _mm256_set1_ps(s)
#define VFMA(a, m, c) _mm256_fmadd_ps((a), (m), (c))
static float first(vec v) { return _mm256_cvtss_f32(v); }
#elif defined(__aarch64__)
#include <arm_neon.h>
#define LOAD_TEXT "NEON FMA (128-bit)"
typedef float32x4_t vec;
#define VSET(s) vdupq_n_f32(s)
#define VFMA(a, m, c) vfmaq_f32((c), (a), (m))
static float first(vec v) { return vgetq_lane_f32(v, 0); }
#elif defined(__SSE2__)
#include <emmintrin.h>
#define LOAD_TEXT "SSE2 multiply-add (128-bit, no FMA in this build)"
typedef __m128 vec;
#define VSET(s) _mm_set1_ps(s)
#define VFMA(a, m, c) _mm_add_ps(_mm_mul_ps((a), (m)), (c))
static float first(vec v) { return _mm_cvtss_f32(v); }
#else
#define LOAD_TEXT "none (no vector unit known to this build)"
#endif

const char *tileops_clock_chain(void) { return CHAIN_TEXT; }
const char *tileops_clock_load(void) { return LOAD_TEXT; }

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#if defined(CHAIN_BLOCK)
/* One round: `blocks` blocks of the chain with the FMA load beside it; returns the chain's value. */
static uint64_t round_(long blocks, uint64_t start, float *sink) {
    uint64_t x = start, one = 1;
#if defined(VFMA)
    /* Eight accumulators with distinct starting values (equal ones would be merged into one), each
     * converging to 1.0 (a*0.999 + 0.001), so no value goes denormal and slows the pipes. */
    vec a0 = VSET(1.0f), a1 = VSET(1.1f), a2 = VSET(1.2f), a3 = VSET(1.3f);
    vec a4 = VSET(1.4f), a5 = VSET(1.5f), a6 = VSET(1.6f), a7 = VSET(1.7f);
    vec m = VSET(0.999f), c = VSET(0.001f);
#define F(a) a = VFMA(a, m, c);
#define F8 F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7)
    for (long i = 0; i < blocks; i++) {
        CHAIN_BLOCK(x, one);
        F8 F8 F8 F8 F8 F8
    }
    *sink += first(a0) + first(a1) + first(a2) + first(a3) + first(a4) + first(a5) + first(a6) + first(a7);
#else
    for (long i = 0; i < blocks; i++) CHAIN_BLOCK(x, one);
    (void)sink;
#endif
    return x;
}
#endif

/* Measure on `threads` threads: per thread, the best of `rounds` timed rounds of `blocks` blocks
 * after one untimed round. ghz[t] = adds / best CPU seconds / 1e9; adds[t] = the chain's final
 * value (every add of every round, counted by the chain itself); *ran = the threads OpenMP gave.
 * Returns 0, or -1 where this architecture has no chain (no inline assembly for it). */
int tileops_clock(int threads, long blocks, int rounds, double *ghz, uint64_t *adds, double *sink, int *ran) {
#if !defined(CHAIN_BLOCK)
    (void)threads; (void)blocks; (void)rounds; (void)ghz; (void)adds; (void)sink; (void)ran;
    return -1;
#else
    #pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        if (t == 0) *ran = omp_get_num_threads();
        float s = 0.0f;
        double best = 0.0;
        uint64_t x = 0;
        for (int r = 0; r <= rounds; r++) {
            #pragma omp barrier
            double t0 = thread_seconds();
            x = round_(blocks, x, &s);
            double dt = thread_seconds() - t0;
            if (r > 0 && dt > 0.0 && (best == 0.0 || dt < best)) best = dt;
        }
        ghz[t] = best > 0.0 ? (double)CHAIN * (double)blocks / best / 1e9 : 0.0;
        adds[t] = x;
        sink[t] = s;
    }
    return 0;
#endif
}
