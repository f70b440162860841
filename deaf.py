import sys, time, zmq
s = zmq.Context().socket(zmq.SUB); s.setsockopt(zmq.RCVHWM, 1); s.setsockopt(zmq.SUBSCRIBE, b"")
s.connect("tcp://127.0.0.1:25700"); time.sleep(float(sys.argv[1]))
