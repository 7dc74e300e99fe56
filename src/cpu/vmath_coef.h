/* vmath_coef.h — coefficients of the vector tanh / erf / exp polynomials shared by the AVX2 (vmath_avx2.h) and
 * AVX-512 (vmath_avx512.h) code: Chebyshev fits (in long double, rounded to float, bench/fit_poly.c) of smooth,
 * slowly varying factors, evaluated by Horner's rule with FMA. Both ISAs run the same operations per lane on
 * these constants, so they give the same bits. Accuracy: see ops_avx2.c. */
#ifndef QVL_CPU_VMATH_COEF_H
#define QVL_CPU_VMATH_COEF_H

/* e^r = 1 + r + r²·P(r) on [-ln2/2, ln2/2], P in 2.88539004·r (6.9e-8 relative). */
static const float vm_exp_p[6] = {9.949806099e-07f, 2.010233766e-05f, 3.468992363e-04f,
                                  5.004694685e-03f, 5.776226521e-02f, 5.000000000e-01f};
/* tanh(x) = x + x·z·Q(z), z = x² in [0, 0.390625] (9.9e-8 relative). */
static const float vm_tanh_q[6] = {6.525173148e-07f, -8.883868759e-06f, 1.201382038e-04f,
                                   -1.638144953e-03f, 2.236610651e-02f, -3.091993928e-01f};
/* erf(x) = x + x·R(z), z = x² in [0, 1.5625] (3.7e-8 absolute). */
static const float vm_erf_r[9] = {1.154328899e-07f, -1.355216227e-06f, 1.398621407e-05f, -1.291481603e-04f,
                                  1.034496934e-03f, -7.047492079e-03f, 3.998833522e-02f, -1.878515333e-01f,
                                  -1.076873019e-01f};
/* erfc(a) = e^(−a²)·G(a), a in [1.25, 4] (1.8e-7 relative). */
static const float vm_erf_g[12] = {-9.000739738e-06f, 2.629308437e-05f, -5.025160863e-05f, 1.428839751e-04f,
                                   -4.207967140e-04f, 1.125759794e-03f, -2.913951408e-03f, 7.341603749e-03f,
                                   -1.787216216e-02f, 4.188709334e-02f, -9.414556623e-02f, 2.018875480e-01f};

/* 2^r = 1 + r·P(r), |r| <= 1/2, P a degree-5 fit of (2^r − 1)/r (7.6e-8 relative): the attention softmax. */
static const float vm_exp2_p[6] = {1.546144777e-04f, 1.339086681e-03f, 9.618056938e-03f,
                                   5.550356954e-02f, 2.402265072e-01f, 6.931471825e-01f};

#endif
