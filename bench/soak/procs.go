package soak

import (
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// service is one long-lived process of the topology under the soak's
// care: started, signalled by the faults, restarted. With keep, it is
// restarted when it exits on its own (as systemd's Restart=always or a
// container runtime would restart a mentatd agent whose engine died).
type service struct {
	name    string
	logDir  string
	spec    harness.Spec
	keep    bool
	mu      sync.Mutex
	proc    *harness.Proc
	starts  int
	held    bool // stopped on purpose: the keeper leaves it down
	closing bool
	wg      sync.WaitGroup
}

// start starts the process (a fresh log file per start, so a restart
// never hides why the last one ended).
func (s *service) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return fmt.Errorf("%s: the soak is stopping", s.name)
	}
	return s.startLocked()
}

func (s *service) startLocked() error {
	spec := s.spec
	spec.Name = fmt.Sprintf("%s.%d", s.name, s.starts)
	s.starts++
	p, err := harness.Start(s.logDir, spec)
	if err != nil {
		return err
	}
	s.proc, s.held = p, false
	if s.keep {
		s.wg.Add(1)
		go s.keeper(p)
	}
	return nil
}

// keeper restarts the process a second after it ended on its own.
func (s *service) keeper(p *harness.Proc) {
	defer s.wg.Done()
	<-p.Done()
	time.Sleep(time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.held || s.proc != p {
		return
	}
	_ = s.startLocked()
}

// pid is the running process's id, 0 when none runs.
func (s *service) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	if done, _ := s.proc.Exited(); done {
		return 0
	}
	return s.proc.PID()
}

// current is the running process (nil when none).
func (s *service) current() *harness.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// kill sends SIGKILL and waits for the exit; the keeper (if any) then
// restarts it.
func (s *service) kill() error {
	p := s.current()
	if p == nil {
		return fmt.Errorf("%s is not running", s.name)
	}
	_ = syscall.Kill(p.PID(), syscall.SIGCONT)
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.Done():
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not exit within 10 s of SIGKILL", s.name)
	}
}

// restart stops the process gracefully (SIGTERM to its group, SIGKILL
// after harness.StopGrace) and starts it again; hard uses SIGKILL at
// once.
func (s *service) restart(hard bool) error {
	s.mu.Lock()
	p := s.proc
	s.held = true
	s.mu.Unlock()
	if p != nil {
		if hard {
			_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
			<-p.Done()
		} else {
			terminate(p)
		}
	}
	return s.start()
}

// stopGrace is how long a process has to stop after SIGTERM: a router's
// drain and shutdown, or the supervisor stopping its gateway (drain and
// requests in flight) and then its model servers.
const stopGrace = 45 * time.Second

// terminate resumes p (a stopped process cannot handle SIGTERM), sends
// it SIGTERM, and SIGKILLs its group if it is still there after
// stopGrace.
func terminate(p *harness.Proc) {
	_ = syscall.Kill(p.PID(), syscall.SIGCONT)
	_ = syscall.Kill(p.PID(), syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(stopGrace):
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.Done()
	}
}

// stop ends the process for good.
func (s *service) stop() {
	s.mu.Lock()
	s.closing = true
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		terminate(p)
	}
	s.wg.Wait()
}
