
pathsŠ{"model": {"preset": "gpt2-tiny"}, "data": {"kind": "text", "path": "/data/a.txt"}, "checkpoint": {"dir": "../up"}, "train_batch_size": 4}"
-oProxyCommand=x
node1:1