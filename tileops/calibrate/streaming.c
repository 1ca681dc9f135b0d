/* The CPU bandwidth mixes with streaming (non-temporal) stores: tileops calibrate's memory envelope.
 *
 * Why C: torch's CPU kernels store through the cache, so every output line is first read
 * (write-allocate) and a copy moves three words per element while STREAM counts two. A
 * streaming store writes the line without reading it, so the bytes STREAM counts are the
 * bytes the hardware moves, and the mixes reach what McCalpin's STREAM reaches (which gets
 * its copy through glibc's memcpy, itself streaming above a size threshold).
 *
 * Built by tileops/calibrate/streaming.py with the host's C compiler at first use, loaded
 * with ctypes. Every mix runs over float arrays on `threads` OpenMP threads, each on one
 * contiguous span of whole cache lines (the same split for the first touch and every pass),
 * and returns the best of `reps` timed passes after one untimed pass, as STREAM does.
 */
#include <omp.h>
#include <stdint.h>

#if defined(__AVX__)
#include <immintrin.h>
#define VEC 8
typedef __m256 vec;
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTREAM(p, v) _mm256_stream_ps((p), (v))
#define VADD(x, y) _mm256_add_ps((x), (y))
#define VMUL(x, y) _mm256_mul_ps((x), (y))
#define VSET(s) _mm256_set1_ps(s)
#define VZERO() _mm256_setzero_ps()
#define FENCE() _mm_sfence()
static float vsum(vec v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
#define STORES "AVX non-temporal stores (vmovntps)"
#elif defined(__SSE2__)
#include <emmintrin.h>
#define VEC 4
typedef __m128 vec;
#define VLOAD(p) _mm_loadu_ps(p)
#define VSTREAM(p, v) _mm_stream_ps((p), (v))
#define VADD(x, y) _mm_add_ps((x), (y))
#define VMUL(x, y) _mm_mul_ps((x), (y))
#define VSET(s) _mm_set1_ps(s)
#define VZERO() _mm_setzero_ps()
#define FENCE() _mm_sfence()
static float vsum(vec v) {
    float t[4];
    _mm_storeu_ps(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}
#define STORES "SSE non-temporal stores (movntps)"
#else
#define STORES "plain stores (no streaming-store instruction used on this architecture)"
#endif

enum { MIX_COPY = 0, MIX_TRIAD = 1, MIX_READ = 2, MIX_WRITE = 3 };

const char *tileops_stores(void) { return STORES; }

/* This thread's span [lo, hi): whole 64-byte lines, the same split in every pass. */
static void span(long n, long *lo, long *hi) {
    long t = omp_get_thread_num(), nt = omp_get_num_threads();
    long per = ((n + nt - 1) / nt + 15) & ~15L;
    *lo = t * per < n ? t * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

#ifdef VEC
/* Elements before a + i is aligned for a streaming store of one vector. */
static long peel(const float *a, long lo, long hi) {
    long i = lo;
    while (i < hi && ((uintptr_t)(a + i) & (sizeof(vec) - 1)) != 0) i++;
    return i;
}
#endif

static void pass_copy(float *a, const float *b, long lo, long hi) {
    long i = lo;
#ifdef VEC
    for (long e = peel(a, lo, hi); i < e; i++) a[i] = b[i];
    for (; i + VEC <= hi; i += VEC) VSTREAM(a + i, VLOAD(b + i));
    FENCE();
#endif
    for (; i < hi; i++) a[i] = b[i];
}

static void pass_triad(float *a, const float *b, const float *c, float s, long lo, long hi) {
    long i = lo;
#ifdef VEC
    vec vs = VSET(s);
    for (long e = peel(a, lo, hi); i < e; i++) a[i] = b[i] + s * c[i];
    for (; i + VEC <= hi; i += VEC) VSTREAM(a + i, VADD(VLOAD(b + i), VMUL(vs, VLOAD(c + i))));
    FENCE();
#endif
    for (; i < hi; i++) a[i] = b[i] + s * c[i];
}

static void pass_write(float *a, float s, long lo, long hi) {
    long i = lo;
#ifdef VEC
    vec vs = VSET(s);
    for (long e = peel(a, lo, hi); i < e; i++) a[i] = s;
    for (; i + VEC <= hi; i += VEC) VSTREAM(a + i, vs);
    FENCE();
#endif
    for (; i < hi; i++) a[i] = s;
}

static double pass_read(const float *b, long lo, long hi) {
    long i = lo;
    double total = 0.0;
#ifdef VEC
    vec s0 = VZERO(), s1 = VZERO(), s2 = VZERO(), s3 = VZERO(); /* four chains hide the add latency */
    for (; i + 4 * VEC <= hi; i += 4 * VEC) {
        s0 = VADD(s0, VLOAD(b + i));
        s1 = VADD(s1, VLOAD(b + i + VEC));
        s2 = VADD(s2, VLOAD(b + i + 2 * VEC));
        s3 = VADD(s3, VLOAD(b + i + 3 * VEC));
    }
    total = (double)vsum(VADD(VADD(s0, s1), VADD(s2, s3)));
#endif
    for (; i < hi; i++) total += b[i];
    return total;
}

/* First touch: each page is written first by the thread that streams it in every pass. */
void tileops_touch(float *a, long n, float value, int threads) {
    #pragma omp parallel num_threads(threads)
    {
        long lo, hi;
        span(n, &lo, &hi);
        pass_write(a, value, lo, hi);
    }
}

/* Best seconds of `reps` timed passes of `mix` (after one untimed pass); *sum gets the read mix's sum, and
 * times[k] (when not NULL, `reps` of them) each timed pass's seconds. */
double tileops_mix(int mix, float *a, const float *b, const float *c, long n, float s, int reps, int threads,
                   double *sum, double *times) {
    double best = 1e300, total = 0.0;
    for (int k = 0; k <= reps; k++) {
        total = 0.0;
        double t0 = omp_get_wtime();
        #pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            long lo, hi;
            span(n, &lo, &hi);
            switch (mix) {
            case MIX_COPY: pass_copy(a, b, lo, hi); break;
            case MIX_TRIAD: pass_triad(a, b, c, s, lo, hi); break;
            case MIX_READ: total += pass_read(b, lo, hi); break;
            default: pass_write(a, s, lo, hi); break;
            }
        }
        double t = omp_get_wtime() - t0;
        if (k > 0 && times) times[k - 1] = t;
        if (k > 0 && t < best) best = t;
    }
    if (sum) *sum = total;
    return best;
}
