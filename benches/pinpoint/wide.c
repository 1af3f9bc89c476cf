/* A call list of 32 sites for counting BinaryFind's and LinearFind's comparisons:
 * main calls w0..w31 in order; with -DSLOW=k, w<k> loops 3 times longer (about 5% of
 * main: a change that passes the default 2% threshold at every layer). */
#ifndef SLOW
#define SLOW -1
#endif
#define NOINLINE __attribute__((noinline))
volatile unsigned long sink;
#define W(k) NOINLINE void w##k(void) { \
    unsigned long n = (k == SLOW) ? 30000 : 10000; \
    for (unsigned long i = 0; i < n; i++) sink += i; }
W(0) W(1) W(2) W(3) W(4) W(5) W(6) W(7) W(8) W(9) W(10) W(11) W(12) W(13) W(14) W(15)
W(16) W(17) W(18) W(19) W(20) W(21) W(22) W(23) W(24) W(25) W(26) W(27) W(28) W(29)
W(30) W(31)
int main(void)
{
    w0(); w1(); w2(); w3(); w4(); w5(); w6(); w7(); w8(); w9(); w10(); w11(); w12();
    w13(); w14(); w15(); w16(); w17(); w18(); w19(); w20(); w21(); w22(); w23(); w24();
    w25(); w26(); w27(); w28(); w29(); w30(); w31();
    return 0;
}
