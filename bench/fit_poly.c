/* fit_poly.c — how the polynomial coefficients of src/cpu/ops_avx2.c and attention_avx2.c (exp2) were made:
 * a Chebyshev fit in long double of f on [a, b] in t = (2x − (a + b))/(b − a), converted to a polynomial in t,
 * rounded to float, then checked by evaluating it in float with FMA (Horner) on 100001 points.
 * Usage: fit_poly WHICH A B DEGREE; prints the max error (relative; absolute for WHICH 4), the float scale and
 * offset that map x to t, and the coefficients, highest degree first. WHICH: 0 erf(√z)/√z; 1 e^(x²)·erfc(x);
 * 2 (tanh(√z)/√z − 1)/z; 3 (e^r − 1 − r)/r²; 4 erf(√z)/√z − 1; 5 (2^r − 1)/r (in t = 2r: multiply the i-th
 * coefficient by 2^i for a polynomial in r). The ones in use:
 *   fit_poly 4 0 1.5625 8     erf, |x| < 1.25          fit_poly 1 1.25 4 11    erf tail, 1.25 <= |x| < 4
 *   fit_poly 2 0 0.390625 5   tanh, |x| < 0.625        fit_poly 3 -0.34657359 0.34657359 5   exp
 *   fit_poly 5 -0.5 0.5 5     exp2 (attention softmax) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef long double ld;
static int which;
static ld f(ld x) {
    switch (which) {
    case 0: /* erf small: erf(sqrt z)/sqrt z, z in [0,1] */
        if (x == 0) return 2.0L / sqrtl(M_PI);
        return erfl(sqrtl(x)) / sqrtl(x);
    case 1: /* erfc scaled: exp(x^2) erfc(x), x in [1,4] */
        return expl(x * x) * erfcl(x);
    case 2: /* tanh small: (tanh(sqrt z)/sqrt z - 1)/z */
        if (x < 1e-6L) return -1.0L / 3 + 2.0L / 15 * x;
        return (tanhl(sqrtl(x)) / sqrtl(x) - 1) / x;
    case 4: /* erf small minus one */
        if (x == 0) return 2.0L / sqrtl(M_PI) - 1;
        return erfl(sqrtl(x)) / sqrtl(x) - 1;
    case 5: /* (2^r - 1)/r */
        if (fabsl(x) < 1e-10L) return logl(2.0L);
        return (powl(2.0L, x) - 1) / x;
    case 3: /* exp: (e^r - 1 - r)/r^2 */
        if (fabsl(x) < 1e-8L) return 0.5L + x / 6;
        return (expl(x) - 1 - x) / (x * x);
    }
    return 0;
}
int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fit_poly WHICH A B DEGREE\n");
        return 2;
    }
    which = atoi(argv[1]);
    ld a = strtold(argv[2], 0), b = strtold(argv[3], 0);
    int deg = atoi(argv[4]);
    enum { NN = 200 };
    ld c[64];
    memset(c, 0, sizeof c);
    for (int j = 0; j <= deg; j++) {
        ld s = 0;
        for (int k = 0; k < NN; k++) {
            ld th = M_PI * (k + 0.5L) / NN, t = cosl(th);
            s += f((a + b) / 2 + (b - a) / 2 * t) * cosl(j * th);
        }
        c[j] = 2 * s / NN;
    }
    c[0] /= 2;
    /* Chebyshev -> monomial in t */
    ld p[64], T0[64], T1[64], T2[64];
    memset(p, 0, sizeof p); memset(T0, 0, sizeof T0); memset(T1, 0, sizeof T1);
    T0[0] = 1; T1[1] = 1;
    for (int i = 0; i <= deg; i++) p[i] += c[0] * T0[i];
    if (deg >= 1) for (int i = 0; i <= deg; i++) p[i] += c[1] * T1[i];
    for (int j = 2; j <= deg; j++) {
        memset(T2, 0, sizeof T2);
        for (int i = 0; i < 63; i++) { T2[i + 1] += 2 * T1[i]; }
        for (int i = 0; i < 64; i++) T2[i] -= T0[i];
        for (int i = 0; i <= deg; i++) p[i] += c[j] * T2[i];
        memcpy(T0, T1, sizeof T0); memcpy(T1, T2, sizeof T1);
    }
    float pf[64];
    for (int i = 0; i <= deg; i++) pf[i] = (float)p[i];
    double worst = 0;
    for (int k = 0; k <= 100000; k++) {
        ld x = a + (b - a) * k / 100000;
        float t = fmaf((float)x, (float)(2 / (b - a)), (float)(-(a + b) / (b - a)));
        float y = pf[deg];
        for (int i = deg - 1; i >= 0; i--) y = fmaf(y, t, pf[i]);
        double e = which == 4 ? fabs((double)(y - f(x))) : fabs((double)((y - f(x)) / f(x)));
        if (e > worst) worst = e;
    }
    printf("/* which %d [%Lg, %Lg] deg %d: max rel err %.3g; scale %.9g offset %.9g */\n", which, a, b, deg, worst,
           (float)(2 / (b - a)), (float)(-(a + b) / (b - a)));
    for (int i = deg; i >= 0; i--) printf("%.9ef,%s", pf[i], i ? " " : "\n");
    return 0;
}
