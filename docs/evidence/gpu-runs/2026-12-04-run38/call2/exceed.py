import torch, sys, glob
sys.path.insert(0,'scripts')
from position_gate_rates import _stats
from glmcheck.checks.position_gate import PositionBand, PositionGate
g=PositionGate()
bins=[(0,1024),(1024,2048),(2048,4096),(4096,8192),(8192,16384),(16384,32768)]
band_size=int(sys.argv[1])
names=[f"band:{k}" for k in range(band_size)]
legit={b:[] for b in bins}; faults={}
for f in sorted(glob.glob('/tmp/kl32k/*.pt')):
    d=torch.load(f)
    for seed,rows in d['seeds'].items():
        for b in bins:
            band=PositionBand.of([_stats(rows[n],*b) for n in names],names)
            for r,e in rows.items():
                if r=='reference' or r in names: continue
                v,why,m=g.judge(_stats(e,*b),band)
                if r.startswith('fault:'): faults.setdefault((r,b),[]).append((m['exceed'],m['median_ratio']))
                else: legit[b].append((m['exceed'],m['median_ratio'],r,seed))
for b in bins:
    L=sorted(legit[b]); ex=[x[0] for x in L]; mr=sorted(x[1] for x in L)
    print(b, f"legit exceed max {ex[-1]:.4f} p99 {ex[int(.99*len(ex))]:.4f} p95 {ex[int(.95*len(ex))]:.4f} median {ex[len(ex)//2]:.4f}; median_ratio max {mr[-1]:.3f} p95 {mr[int(.95*len(mr))]:.3f}", "top:", [(round(x[0],4),x[2][-6:],x[3]) for x in L[-3:]])
    for (r,bb),v in faults.items():
        if bb==b:
            e=sorted(x[0] for x in v); m=sorted(x[1] for x in v)
            print("   ",r, f"exceed min {e[0]:.4f} median {e[len(e)//2]:.4f}; median_ratio min {m[0]:.3f}")
